"""dbt compatibility: dbt_project.yml and profiles, dbt sources, dbt's Jinja surface and cross-database macros, packages."""
