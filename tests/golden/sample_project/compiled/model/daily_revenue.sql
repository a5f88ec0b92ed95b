
select order_date, count(*) as orders, sum(total) as revenue
from `orders_enriched`
group by order_date
