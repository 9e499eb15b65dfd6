"""The service layer: every action a person can take, as one function over the catalogue.

The Gradio tabs and the CLI commands call these and nothing else below them; an action that needs background work
queues it here (db never imports the job queue). One module per area."""
