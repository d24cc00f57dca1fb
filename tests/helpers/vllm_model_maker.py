"""Make the tiny model the ``vllm`` tests serve: ``python vllm_model_maker.py OUT_DIR``.

Runs with the vLLM venv's Python (``tests/helpers/vllm_engine.py``: transformers, tokenizers and
torch are vLLM's own dependencies) and writes a Hugging Face model directory vLLM loads offline:

- a byte-level BPE tokenizer trained by ``tokenizers`` on the conversations below (about 600
  tokens; special ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``; ``<think>``, ``</think>``,
  ``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>`` as single added
  tokens that decode to text, which vLLM's ``qwen3`` reasoning parser and ``hermes`` tool-call
  parser look up);
- a Hermes-style chat template (ChatML turns, tools listed in the system turn, calls as
  ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``, tool results as
  ``<tool_response>`` user turns, an assistant's reasoning ``R`` as ``<think>R</think>``,
  ``enable_thinking: false`` puts an empty think block into the generation prompt, as Qwen3's does);
- a Qwen2-shaped model (2 layers, hidden size 128, about 0.4 M parameters) trained for a few hundred
  steps on those conversations until greedy decoding says, after its prompt:
  with no tools ``<think>\\nThe user wants a short reply.\\n</think>OK``; with tools and a user
  turn last, a think block and ``get_code({"key": "alpha"})``; after a tool result, a think block and
  ``The code is in the tool result.``; with ``enable_thinking: false`` the same without the think
  block. Every history turn renders exactly as it was generated, so a multi-turn prompt starts with
  the previous prompt and generation (what training-token capture checks).

Everything is seeded: the same script makes the same files on any machine with these versions.
The directory is small (about 1.5 MB); making it takes minutes of CPU (docs/rollouts.md, "A real
vLLM engine", has the figures), once per version of this script.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call functions. Their signatures are within <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nReturn each call as <tool_call>\\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
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
    "{{- '<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}"
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

WORDS = ("what is the code for alpha please reply with the word OK hello tell me a short story about cats "
         "compute 17 times 23 find the secret key look it up and report it how many legs does a spider have "
         "answer briefly say something nice probe check ready weather today is sunny summarize this text").split()
TOOLS = [
    {"type": "function", "function": {"name": "get_code", "description": "Look up the secret code of a key.",
                                      "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                                                     "required": ["key"]}}},
    {"type": "function", "function": {"name": "echo", "description": "Echo a text back.",
                                      "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}},
]
REPLY = ("The user wants a short reply.", "OK")
CALL = ("I will call the tool.", {"name": "get_code", "arguments": {"key": "alpha"}})
AFTER = ("The tool gave its result.", "The code is in the tool result.")


def sentence(rng: random.Random) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14)))
    return text[0].upper() + text[1:] + rng.choice([".", "?", "!"])


def assistant_text(reasoning: str | None, content: str = "", call: dict | None = None) -> str:
    """What the template renders for an assistant turn (without ``<|im_start|>assistant\\n``)."""
    out = f"<think>\n{reasoning}\n</think>" if reasoning else ""
    out += content
    if call:
        out += f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {json.dumps(call["arguments"])}}}\n</tool_call>'
    return out + "<|im_end|>"


def conversations(rng: random.Random, n: int) -> list[tuple[list[dict], list[dict] | None, bool, str]]:
    """``(messages, tools, thinking, target)``: the target is the next assistant turn."""
    out = []
    for i in range(n):
        thinking = i % 4 != 3
        messages = [{"role": "system", "content": sentence(rng)}] if rng.random() < 0.3 else []
        messages.append({"role": "user", "content": sentence(rng)})
        kind = i % 3
        tools = None
        if kind == 0:
            target = assistant_text(REPLY[0] if thinking else None, REPLY[1])
        else:
            tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
            if kind == 1:
                target = assistant_text(CALL[0] if thinking else None, call=CALL[1])
            else:
                messages.append({"role": "assistant", "content": None,
                                 "reasoning_content": f"\n{CALL[0]}\n" if thinking else None,
                                 "tool_calls": [{"type": "function", "id": "call_1",
                                                 "function": {"name": "get_code",
                                                              "arguments": json.dumps(CALL[1]["arguments"])}}]})
                messages.append({"role": "tool", "tool_call_id": "call_1", "content": json.dumps(
                    {"key": "alpha", "code": f"CODE-{rng.randrange(16**6):06x}"})})
                target = assistant_text(AFTER[0] if thinking else None, AFTER[1])
        out.append((messages, tools, thinking, target))
    return out


def main(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    t0 = time.monotonic()
    rng = random.Random(0)
    torch.manual_seed(0)
    convs = conversations(rng, 144)

    # The tokenizer: trained on renderings made with a throwaway template-only tokenizer.
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=CHAT_TEMPLATE)
    corpus = [plain.apply_chat_template(m, tools=t, tokenize=False, add_generation_prompt=True,
                                        enable_thinking=th) + target for m, t, th, target in convs]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(corpus, trainer)
    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, chat_template=CHAT_TEMPLATE, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", bos_token=None, unk_token=None,
                                  model_max_length=4096, clean_up_tokenization_spaces=False)

    # The training set: prompt ids, then target ids (only the target is learned).
    rows = []
    for messages, tools, thinking, target in convs:
        prompt = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=thinking)
        p, t = tok(prompt, add_special_tokens=False)["input_ids"], tok(target, add_special_tokens=False)["input_ids"]
        rows.append((p, t))
    width = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, t) in enumerate(rows):
        seq = p + t
        ids[i, :len(seq)] = torch.tensor(seq)
        labels[i, len(p):len(seq)] = torch.tensor(t)
        mask[i, :len(seq)] = 1

    config = Qwen2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, rope_theta=10000.0, bos_token_id=None,
                         eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tok.pad_token_id, torch_dtype="float32")
    model = Qwen2ForCausalLM(config)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    loss_value, step = float("inf"), 0
    for step in range(1, 801):
        batch = torch.randperm(len(rows))[:32]
        loss = model(input_ids=ids[batch], attention_mask=mask[batch], labels=labels[batch]).loss
        optim.zero_grad()
        loss.backward()
        optim.step()
        loss_value = loss.item()
        if step >= 100 and loss_value < 0.002:
            break
    model.eval()

    # Greedy decoding must give every target: the tests rely on it.
    with torch.no_grad():
        for p, t in rows[:12]:
            got = model.generate(torch.tensor([p]), max_new_tokens=len(t) + 2, do_sample=False,
                                 eos_token_id=config.eos_token_id, pad_token_id=tok.pad_token_id)[0, len(p):].tolist()
            if got[:len(t)] != t:
                raise SystemExit(f"greedy output {tok.decode(got)!r} is not the trained {tok.decode(t)!r} "
                                 f"(loss {loss_value:.4f} after {step} steps)")

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    model.generation_config.save_pretrained(out)
    tok.save_pretrained(out)
    print(json.dumps({"steps": step, "loss": round(loss_value, 5), "vocab": len(tok),
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "seconds": round(time.monotonic() - t0, 1)}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
