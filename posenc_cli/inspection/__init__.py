"""`posenc inspect`: the chapters' claims about a positional scheme, measured on tensors and drawn.

checks: each claim measured as a PASS/FAIL Check; figures: the scheme drawn from its hooks;
command: the `posenc inspect` entry point and its printed report.
"""
