"""The release version of areal-workers: the package, the chart (charts/areal-workers/Chart.yaml `version`, checked
equal by the tests and by `make release`) and the images `make release` pushes. pyproject.toml reads it from here."""

__version__ = "0.2.0"
