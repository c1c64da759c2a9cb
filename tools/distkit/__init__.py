"""`make release`: the package, the chart and the images of one version, built, checked and pushed to a registry
(`python -m distkit build|push`). Named for dist/, where the artifacts go: not areal_workers.release, the adapter's
helm releases."""
