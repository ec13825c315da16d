from posenc_cli.model.gpt import GPT, ModelConfig, token_nll

__all__ = ["GPT", "ModelConfig", "token_nll"]
