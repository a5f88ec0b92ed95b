{% macro cents_to_amount(column) -%}
    cast({{ column }} as decimal(12, 2))
{%- endmacro %}
