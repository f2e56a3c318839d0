"""Deployments: starting and attaching to one (``start``), the handle on one (``cluster``), and the one
seam between raygroups and Ray (``seam``: actor names, options, creation and lookup)."""
