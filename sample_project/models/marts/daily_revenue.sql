{{ config(materialized='table') }}
select order_date, count(*) as orders, sum(total) as revenue
from {{ ref('orders_enriched') }}
group by order_date
