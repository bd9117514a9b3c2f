"""The audit dashboard: overview charts, history, one admission's detail, CSV export."""
