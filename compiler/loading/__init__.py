"""Loading a project: its files read into typed specs (project, profiles, properties, seeds, folders' configs), secrets declared on specs."""
