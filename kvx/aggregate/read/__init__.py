"""Reading records: where they come from (an MLflow store, record files, imported releases), their
validation, and the flat rows and cells every analysis reads."""
