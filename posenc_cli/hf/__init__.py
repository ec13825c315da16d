"""Hugging Face interop: `hf:` models and posenc exports as evaluation targets (models, model_loading,
model_checks, layouts, extended_attention, rope_config, memory, loading_options), `posenc export` and
its verification (export, export_loading, export_target, remote_code, model_files), and targets.py,
which loads any target by name. It implements evaluation's EvalTarget protocol, so it sits above
evaluation in the layers; the modelling code an export imports stays at its published path,
evaluation/hf_modeling.py."""
