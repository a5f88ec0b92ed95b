select
    order_id,
    customer_id,
    product,
    quantity,
    cast(total as decimal(12, 2)) as total,
    status,
    created_at,
    cast(created_at as date) as order_date
from `shop__orders`
where total >= 0
