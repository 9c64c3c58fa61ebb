-- A SQL model over the sample traces `orders` and `customers`: each view is maintained
-- incrementally as a Python pipeline is (`ddcli run sample_data/models/regions.sql`).

-- an intermediate view: every order with its customer's region
CREATE VIEW placed AS
  SELECT o.order_id, o.customer, o.amount, c.region
  FROM orders o JOIN customers c ON o.customer = c.customer;

-- output traces
CREATE MATERIALIZED VIEW region_revenue AS
  SELECT region, sum(amount) AS revenue, count(*) AS orders, count(DISTINCT customer) AS buyers
  FROM placed
  GROUP BY region;

CREATE MATERIALIZED VIEW idle_customers AS
  SELECT c.customer, c.region
  FROM customers c
  WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer = c.customer);

CREATE MATERIALIZED VIEW largest_orders AS
  SELECT order_id, customer, amount FROM orders ORDER BY amount DESC, order_id LIMIT 3;
