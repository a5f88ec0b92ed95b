"""The DAG, selection and state: the graph, dbt-style selectors, what changed since a --state compile."""
