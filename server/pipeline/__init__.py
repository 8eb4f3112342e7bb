"""The request pipeline and what it needs: validation, model names, prompts, long inputs, token
inputs, a request's cost and weight, parts sent to the engines as each is ready and their answers.
Runs in the front ends.
"""
