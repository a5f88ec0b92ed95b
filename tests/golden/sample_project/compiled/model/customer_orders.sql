
with per_customer as (
    select
        customer_id,
        max(customer_name) as customer_name,
        count(*) as orders,
        sum(total) as revenue,
        max(created_at) as last_order_at
    from `orders_enriched`
    where status <> 'cancelled'
    group by customer_id
)
select
    customer_id,
    customer_name,
    orders,
    revenue,
    last_order_at,
    case when revenue >= 500 then 'vip' else 'regular' end as segment,
    rank() over (order by revenue desc) as revenue_rank
from per_customer
