
select
    o.order_id,
    o.customer_id,
    u.name as customer_name,
    o.product,
    o.quantity,
    o.total,
    o.status,
    o.order_date,
    o.created_at,
    'eu' as region
from `stg_orders` o
left join `stg_users` u on u.customer_id = o.customer_id

where o.created_at > (select max(created_at) from `orders_enriched`)

