select
    order_id,
    customer_id,
    product,
    quantity,
    cast(cast(total_cents as decimal(14, 0)) / 100 as decimal(12, 2)) as total,
    status,
    created_at,
    cast(created_at as date) as order_date
from `orders`
where cast(cast(total_cents as decimal(14, 0)) / 100 as decimal(12, 2)) >= 0
