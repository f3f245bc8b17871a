"""Arithmetic expressions with variables: tokenize, parse to postfix, evaluate."""

import re

TOKEN = re.compile(r"[0-9.]+|[a-z_]+|[^ ]")  # the speed-up patch tokenizes with it
DIGITS = frozenset("0123456789.")
LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz_")
OPERATORS = ("+", "-", "*", "/")
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
KINDS = ("numbers", "variables", "nested")
SMALLEST = {"numbers": 150, "variables": 150, "nested": 40}


def number(text):
    return float(text)


def variable(name, values):
    return values[name]


def tokenize(text):
    tokens = []
    position = 0
    while position < len(text):
        character = text[position]
        if character == " ":
            position += 1
            continue
        end = position + 1
        if character in DIGITS:
            while end < len(text) and text[end] in DIGITS:
                end += 1
        elif character in LETTERS:
            while end < len(text) and text[end] in LETTERS:
                end += 1
        token = text[position:end]
        tokens.append(token)
        position = end
    return tokens


def postfix(tokens):
    output, stack = [], []
    for index in range(len(tokens)):
        token = tokens[index]
        if token in PRECEDENCE:
            while stack and stack[-1] in PRECEDENCE and PRECEDENCE[stack[-1]] >= PRECEDENCE[token]:
                output.append(stack.pop())
            stack.append(token)
        elif token == "(":
            stack.append(token)
        elif token == ")":
            while stack[-1] != "(":
                output.append(stack.pop())
            stack.pop()
        else:
            output.append(token)
    while stack:
        output.append(stack.pop())
    return output


def evaluate(items, values):
    stack = []
    for item in items:
        if item in PRECEDENCE:
            right, left = stack.pop(), stack.pop()
            if item == "+":
                stack.append(left + right)
            elif item == "-":
                stack.append(left - right)
            elif item == "*":
                stack.append(left * right)
            else:
                stack.append(left / right if right else 0.0)
        elif item[0] in LETTERS:
            stack.append(variable(item, values))
        else:
            stack.append(number(item))
    return stack[0]


def run(argument):
    text, values = argument
    return evaluate(postfix(tokenize(text)), values)


def make_input(kind, size, rng):
    names = ["alpha", "beta", "gamma_rate", "delta", "total_count", "x"]
    values = {name: rng.uniform(1, 5) for name in names}

    def operand():
        if kind == "variables":
            return rng.choice(names)
        return f"{rng.uniform(1, 999):.3f}"

    if kind == "nested":
        text = operand()
        for _ in range(size):
            text = f"({text} {rng.choice(OPERATORS)} {operand()})"
        return text, values
    parts = [operand()]
    for _ in range(size):
        parts += [rng.choice(OPERATORS), operand()]
    return " ".join(parts), values
