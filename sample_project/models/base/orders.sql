-- The shop's orders as its database keeps them: amounts in cents. The head of the order
-- pipeline: `rivc run --select orders+` runs it, staging, the marts, their sinks and tests.
select
    order_id,
    customer_id,
    product,
    quantity,
    cast(total * 100 as bigint) as total_cents,
    status,
    created_at
from {{ source('shop', 'orders') }}
