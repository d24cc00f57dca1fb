"""Make the tiny model the ``vllm`` tests serve: ``python vllm_model_maker.py OUT_DIR``.

Runs with the vLLM venv's Python (``tests/helpers/vllm_engine.py``: transformers, tokenizers and
torch are vLLM's own dependencies) and writes, in a few seconds, a Hugging Face model directory
vLLM loads offline. Nothing is trained: the weights are set by hand, so greedy decoding gives fixed
answers on any prompt the chat template renders:

- a byte-level BPE tokenizer trained by ``tokenizers`` on renderings of a few conversations (about
  500 tokens; special ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``), with added tokens that
  decode to text: ``<think>``, ``</think>``, ``<tool_call>``, ``</tool_call>``, ``<tool_response>``,
  ``</tool_response>`` (which vLLM's ``qwen3`` reasoning parser and ``hermes`` tool-call parser look
  up), ``<tools>``, and each phrase of the answers below, so that an answer is a handful of tokens
  and renders back into the same ids;
- a Hermes-style chat template (ChatML turns, tools listed in the system turn inside
  ``<tools></tools>``, calls as ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``, tool
  results as ``<tool_response>`` user turns, an assistant's reasoning ``R`` as ``<think>R</think>``,
  ``enable_thinking: false`` puts an empty think block into the generation prompt, as Qwen3's does);
- a Qwen2-shaped model (1 layer, hidden size 128, untied output head) that is a lookup table: the
  next token is a function of the current token and of the conversation's kind, which the one
  attention head reads off the prompt (a ``<tool_response>`` token anywhere: "after a tool result";
  else a ``<tools>`` token: "tools offered"; else "plain"). After its generation prompt it says:

  ==========================  ===============================================================
  plain                       ``<think>\\nThe user wants a short reply.\\n</think>OK``
  tools offered               ``<think>\\nI will call the tool.\\n</think>`` and the call
                              ``get_code({"key": "alpha"})`` in ``<tool_call>`` tags
  after a tool result         ``<think>\\nThe tool gave its result.\\n</think>The code is in the
                              tool result.``
  ==========================  ===============================================================

  each then ``<|im_end|>``; with ``enable_thinking: false`` the same without the think block. Where
  vLLM's guided decoding forbids that answer (``tool_choice: required`` or a named function: a JSON
  grammar), the second choice of each step spells ``[{"name": "get_code", "parameters": {"key":
  "alpha"}}]``; past that, whitespace is the model's last choice (a JSON grammar allows endless
  whitespace). Every history turn renders exactly as it was generated, so a multi-turn prompt starts
  with the previous prompt and generation (what training-token capture checks).

The script checks greedy decoding of every kind with transformers before it saves anything, and
refuses a tokenizer under which two answers would need different next tokens after the same one.
The same script makes the same files on any machine with these versions. The directory is small
(about 1.2 MB) and takes seconds of CPU to make (docs/rollouts.md, "A real vLLM engine", has the
figures), once per version of this script.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>"]
# the answers' phrases (each one added token) and the calls they make
THINK = {
    "plain": "\nThe user wants a short reply.\n",
    "tools": "\nI will call the tool.\n",
    "after": "\nThe tool gave its result.\n",
}
CALL = {"name": "get_code", "arguments": {"key": "alpha"}}
CALL_TEXT = f'\n{{"name": "{CALL["name"]}", "arguments": {json.dumps(CALL["arguments"])}}}\n'
ANSWER = {
    "plain": ["OK"],
    "tools": ["<tool_call>", CALL_TEXT, "</tool_call>"],
    "after": ["The code is in the tool result."],
}
# the second choices: the same call as vLLM's tool grammar spells it (a JSON list of name/parameters)
FORCED = ['[{"name": "', CALL["name"], '", "parameters": {"key": "', "alpha", '"}}]']
PHRASES = [*THINK.values(), *(p for a in ANSWER.values() for p in a if p not in TAGS), *FORCED]
KINDS = ("plain", "tools", "after")
MARKER = {"tools": "<tools>", "after": "<tool_response>"}  # what attention looks for, per kind

CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call functions. Their signatures are within <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    '{{- \'\\n</tools>\\n\\nReturn each call as <tool_call>\\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}"
    "{%- if not loop.first %}{{- '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role == 'user' %}"
    "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- set reasoning = message.reasoning_content or message.reasoning %}"
    "{%- if reasoning %}{{- '<think>' + reasoning + '</think>' }}{%- endif %}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + tool_call.name + \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

WORDS = (
    "what is the code for alpha please reply with the word hello tell me a short story about cats "
    "compute 17 times 23 find the secret key look it up and report it how many legs does a spider have "
    "answer briefly say something nice probe check ready weather today is sunny summarize this text"
).split()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_code",
            "description": "Look up the secret code of a key.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo a text back.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}},
]


def sentence(rng: random.Random) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14)))
    return text[0].upper() + text[1:] + rng.choice([".", "?", "!"])


def conversation(kind: str, rng: random.Random) -> tuple[list[dict], list[dict] | None]:
    """``(messages, tools)`` of a conversation of ``kind`` whose next turn is the assistant's."""
    messages = [{"role": "system", "content": sentence(rng)}] if rng.random() < 0.3 else []
    messages.append({"role": "user", "content": sentence(rng)})
    if kind == "plain":
        return messages, None
    tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
    if kind == "after":
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": THINK["tools"],
                "tool_calls": [
                    {
                        "type": "function",
                        "id": "call_1",
                        "function": {"name": CALL["name"], "arguments": json.dumps(CALL["arguments"])},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": json.dumps({"key": "alpha", "code": f"CODE-{rng.randrange(16**6):06x}"}),
            }
        )
    return messages, tools


def answer(kind: str, thinking: bool) -> list[str]:
    """The tokens (as text) the model generates for ``kind``."""
    return (["<think>", THINK[kind], "</think>"] if thinking else []) + ANSWER[kind] + ["<|im_end|>"]


def tokenizer(rng: random.Random):
    """The BPE tokenizer (module doc), trained on prompts rendered with a throwaway template-only one
    (prompts only: a prompt ending in ``\\n\\n``, ``enable_thinking: false``'s, then ends in a token of
    its own, not in the ``\\n`` every other prompt ends with)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=CHAT_TEMPLATE)
    corpus = []
    for i in range(96):
        kind, thinking = KINDS[i % 3], i % 4 != 3
        messages, tools = conversation(kind, rng)
        corpus.append(
            plain.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True, enable_thinking=thinking
            )
        )
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=500,
            special_tokens=SPECIAL,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS + PHRASES])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )


def transitions(tok, rng: random.Random) -> tuple[dict[int, dict[str, int]], list[tuple[list[int], list[int]]]]:
    """``{current id: {kind: next id}}`` read off rendered prompts and their answers, and those
    ``(prompt ids, answer ids)`` for the check; SystemExit where one token would need two next tokens."""
    table: dict[int, dict[str, int]] = {}
    examples = []
    for kind in KINDS:
        for thinking in (True, False):
            messages, tools = conversation(kind, rng)
            prompt = tok.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True, enable_thinking=thinking
            )
            p = tok(prompt, add_special_tokens=False)["input_ids"]
            t = tok.convert_tokens_to_ids(answer(kind, thinking))
            examples.append((p, t))
            for cur, nxt in zip([p[-1], *t[:-1]], t, strict=True):
                if table.setdefault(cur, {}).setdefault(kind, nxt) != nxt:
                    raise SystemExit(
                        f"token {tok.convert_ids_to_tokens(cur)!r} would need two next tokens for {kind!r}"
                    )
    return table, examples


def weights(tok, table: dict[int, dict[str, int]], hidden: int, head_dim: int) -> dict[str, torch.Tensor]:
    """The state dict of the 1-layer Qwen2 (module doc).

    The residual stream: dimension 0 is 1 for every token (the bias), each token of the table or
    marker has a dimension of its own (every other token shares dimension 1), and the attention
    writes the conversation's kind into dimensions 2 ("tools") and 3 ("after"). Every token's
    embedding is two entries of 1, so RMSNorm turns each into ``sqrt(hidden / 2)``. Head 0 puts
    its query (a constant, from the bias) and keys on its lowest-frequency rotary pair, where RoPE
    turns a vector by under a hundredth of a radian over the whole context: the scores are the
    content's alone, 20 on ``<tools>``, 40 on ``<tool_response>``, 0 elsewhere, so the head reads
    the latter where there is one, else the former, else nothing. The MLP is zero. The output head
    scores each next token: 40 for the table's one next token of the current token, 20 (plus 4 for
    "plain") for each kind's choice where the kinds differ, plus 8 ("tools") or 16 ("after") from
    the kind, 10 for the second choice ``FORCED`` spells, small constants for the rest:
    ``<|im_end|>`` first, whitespace last.
    """
    import torch

    vocab = len(tok)
    ids = tok.convert_tokens_to_ids
    own = list(table) + [ids(MARKER["tools"]), ids(MARKER["after"])]
    own = list(dict.fromkeys(own + ids(FORCED)))
    if len(own) + 4 > hidden:
        raise SystemExit(f"{len(own)} tokens need their own dimension; hidden size {hidden} is too small")
    dim = {t: 4 + i for i, t in enumerate(own)}
    embed = torch.zeros(vocab, hidden)
    embed[:, 0] = 1.0
    for t in range(vocab):
        embed[t, dim.get(t, 1)] = 1.0
    unit = (hidden / 2) ** 0.5  # every token's entries after RMSNorm

    q_w, k_w, v_w, o_w = (torch.zeros(hidden, hidden) for _ in range(4))
    q_b = torch.zeros(hidden)
    slow = head_dim // 2 - 1  # head 0's lowest-frequency rotary pair is (slow, head_dim - 1)
    q_b[slow] = 1.0
    for kind, score in (("tools", 20.0), ("after", 40.0)):
        k_w[slow, dim[ids(MARKER[kind])]] = score * head_dim**0.5 / unit
    for j, kind in enumerate(("tools", "after")):
        v_w[j, dim[ids(MARKER[kind])]] = 1.0 / unit
        o_w[2 + j, j] = 1.0

    head = torch.zeros(vocab, hidden)
    head[:, 0] = torch.tensor([-2.0 if tok.decode([t]).isspace() else 0.0 for t in range(vocab)])
    head[ids("<|im_end|>"), 0] = 2.0
    chain = ids(FORCED)
    for t in dim:
        head[chain[0], dim[t]] = 10.0
    for cur, nxt in zip(chain, chain[1:], strict=False):
        head[nxt, dim[cur]], head[chain[0], dim[cur]] = 10.0, 0.0
    for cur, by_kind in table.items():
        if len(set(by_kind.values())) == 1:
            head[next(iter(by_kind.values())), dim[cur]] = 40.0
        else:
            for kind, nxt in by_kind.items():
                head[nxt, dim[cur]] = 24.0 if kind == "plain" else 20.0
    for by_kind in table.values():
        for j, kind in enumerate(("tools", "after")):
            if kind in by_kind and len(set(by_kind.values())) > 1:
                head[by_kind[kind], 2 + j] = 8.0 * (j + 1)
    head /= unit  # the final RMSNorm scales the residual stream by about ``unit``

    zeros = lambda *shape: torch.zeros(*shape)  # noqa: E731
    inter = hidden * 2
    return {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": head,
        "model.norm.weight": torch.ones(hidden),
        "model.layers.0.input_layernorm.weight": torch.ones(hidden),
        "model.layers.0.post_attention_layernorm.weight": torch.ones(hidden),
        "model.layers.0.self_attn.q_proj.weight": q_w,
        "model.layers.0.self_attn.q_proj.bias": q_b,
        "model.layers.0.self_attn.k_proj.weight": k_w,
        "model.layers.0.self_attn.k_proj.bias": zeros(hidden),
        "model.layers.0.self_attn.v_proj.weight": v_w,
        "model.layers.0.self_attn.v_proj.bias": zeros(hidden),
        "model.layers.0.self_attn.o_proj.weight": o_w,
        "model.layers.0.mlp.gate_proj.weight": zeros(inter, hidden),
        "model.layers.0.mlp.up_proj.weight": zeros(inter, hidden),
        "model.layers.0.mlp.down_proj.weight": zeros(hidden, inter),
    }


def main(out: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    t0 = time.monotonic()
    rng = random.Random(0)
    tok = tokenizer(rng)
    table, examples = transitions(tok, rng)
    hidden, heads = 128, 4
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.load_state_dict(weights(tok, table, hidden, hidden // heads), strict=True)
    model.eval()

    # Greedy decoding must give every answer: the tests rely on it.
    with torch.no_grad():
        for p, t in examples:
            got = model.generate(
                torch.tensor([p]),
                attention_mask=torch.ones(1, len(p), dtype=torch.long),
                max_new_tokens=len(t) + 2,
                do_sample=False,
                eos_token_id=config.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )[0, len(p) :].tolist()
            if got[: len(t)] != t:
                raise SystemExit(f"greedy output {tok.decode(got)!r} is not the answer {tok.decode(t)!r}")

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    model.generation_config.save_pretrained(out)
    tok.save_pretrained(out)
    print(
        json.dumps(
            {
                "vocab": len(tok),
                "parameters": sum(p.numel() for p in model.parameters()),
                "table": len(table),
                "seconds": round(time.monotonic() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
