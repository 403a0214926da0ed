"""What a run keeps: the FullCache control and artifact stores, spooled records of cells in progress,
MLflow tracking (runs, claims and leases, traces) and the private PostgreSQL cluster of a tracking
server."""
