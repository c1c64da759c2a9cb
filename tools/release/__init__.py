"""`make release`: the package, the chart and the images of one version, built, checked and pushed to a registry."""
