"""The GPT shapes the ZeRO benchmarks dry-run, gpt2-tiny to gpt2-xl, as ferry train flags."""
shapes = {
    "gpt2-tiny": ["--model", "gpt2-tiny"],
    "17M": ["--layers", "4", "--hidden", "512", "--heads", "8", "--vocab", "8192"],
    "gpt2": ["--model", "gpt2"],
    "gpt2-medium": ["--model", "gpt2-medium"],
    "gpt2-large": ["--model", "gpt2-large"],
    "gpt2-xl": ["--model", "gpt2-xl"],
}
