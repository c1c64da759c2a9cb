"""The generated docs (`make docs`; each also `python -m docgen.<name> [--check]`): chart, the values table of the
chart's README; config, docs/*/configuration.md; cli, docs/*/cli.md. generated_files writes or checks them."""
