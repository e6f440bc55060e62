"""torch-only code: the Llama model, token dataset, training program. Never imports Prefect."""
