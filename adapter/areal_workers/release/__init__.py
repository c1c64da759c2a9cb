"""The chart's side of a trial, as data and helm: a Job as chart values (and the image references in them), one
revision as a ReleaseModel, the helm client, the capacity preflight of rendered pods and AReaL's name records."""
