select
    order_id,
    customer_id,
    product,
    quantity,
    {{ cents_to_amount('total_cents') }} as total,
    status,
    created_at,
    cast(created_at as date) as order_date
from {{ ref('orders') }}
where {{ cents_to_amount('total_cents') }} >= ${min_total}
