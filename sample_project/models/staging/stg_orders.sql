select
    order_id,
    customer_id,
    product,
    quantity,
    {{ cents_to_amount('total') }} as total,
    status,
    created_at,
    cast(created_at as date) as order_date
from {{ source('shop', 'orders') }}
where total >= ${min_total}
