{% macro cents_to_amount(column) -%}
    cast(cast({{ column }} as decimal(14, 0)) / 100 as decimal(12, 2))
{%- endmacro %}
