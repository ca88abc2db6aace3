"""Plain English for the synthetic checkpoint's tokenizer and for filling prompts to a token count.

The tiny fixture's tokenizer knows 192 merges, so its prompts take about twice the tokens a Qwen tokenizer needs for
the same text. The synthetic checkpoint trains the same tokenizer on this text instead, with merges enough to make
every word here (and in the checkpoint's own prompt) one token, as in Qwen's vocabulary. Filler text built from
these words then costs about one token per word with that tokenizer, so a prompt can be sized to a token count.

Standard library only: the GPU check uses ``filler_text`` before anything is installed.
"""
from __future__ import annotations

FILLER_WORDS = tuple(dict.fromkeys(
    """
    the a an and or but if then when while after before because so that this these those it its they them their
    we our you your he she his her one two three four five six seven eight nine ten first second third last next
    order orders customer customers account payment payments refund refunds charge charged invoice invoices
    shipment shipments parcel package delivery delivered depot warehouse carrier courier address street city
    country region route truck driver weather storm delay delayed late early time day days week weeks month
    monday tuesday wednesday thursday friday saturday sunday morning evening night today yesterday tomorrow
    asked asks ask request requested requests reply replied message messages email call called phone support
    agent team billing shipping sales legal manager review reviewed approve approved reject rejected escalate
    escalated decision decide decided option options answer answers question questions criterion criteria
    state states holds hold does not is are was were has have had will would should could can may might must
    yes no true false high low medium urgent normal priority risk fraud safe unsafe policy rule rules limit
    price cost total amount balance credit debit card bank transfer cash receipt number code product products
    item items box boxes size color broken damaged missing wrong correct complete partial return returned
    replace replaced replacement store online website app login password user users system service services
    problem problems issue issues error errors report reported note notes history record records status
    open closed pending waiting waited again still already never always often sometimes twice once more less
    most least many much few some any every each other same different new old small large good bad best worst
    said says told tells wrote writes wants wanted needs needed expects expected promised confirmed checked
    found sent received paid opened closed arrived left stopped started moved changed updated cancelled
    with without from into onto over under about between through during against across near far inside outside
    up down out off on in at by for to of as than too very also only just even back there here where which who
    """.split()
))

# Prompt-shaped lines (the schema and skeleton layout of the checkpoint's prompt), so that indentation, option
# letters and quoting merge like ordinary text.
_PROMPT_LINES = (
    "## State\n## Decision schema\n",
    "    A = yes: It holds.\n    B = no: It does not.\n",
    '{\n    "q1": "A",\n    "q2": "B",\n    "team": "C"\n}',
    "Which team should handle this request? Rate the priority. Does criterion one hold for this state?",
)


def filler_text(n_words: int) -> str:
    """``n_words`` words of FILLER_WORDS in a fixed order, as sentences of eleven words each."""
    words = []
    state = 12345
    for index in range(n_words):
        state = (state * 1103515245 + 12345) % 2 ** 31  # a fixed sequence, the same on every machine
        words.append(FILLER_WORDS[state % len(FILLER_WORDS)])
        if index % 11 == 10:
            words[-1] += "."
    return " ".join(words) + ("." if n_words % 11 else "")


def training_texts(prompt_texts: tuple = ()) -> list:
    """The texts to train the synthetic tokenizer on: every filler word many times, in changing neighbourhoods,
    the prompt layout and the checkpoint's own fixed prompt texts."""
    texts = [filler_text(4000)]
    texts.extend(" ".join(FILLER_WORDS[offset::7]) for offset in range(7))
    texts.extend(" ".join(word.capitalize() for word in FILLER_WORDS[offset::7]) for offset in range(7))
    texts.extend(_PROMPT_LINES)
    texts.extend(prompt_texts)
    return texts
