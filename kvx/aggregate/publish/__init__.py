"""Publishing what the analyses found: CSV and Markdown tables, the HTML report, figures, and the
aggregate run logged to MLflow."""
