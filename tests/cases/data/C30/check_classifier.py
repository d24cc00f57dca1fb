# Feeds four real vLLM 400 messages (paraphrased shapes) to the vllm_model server's context-length test.
# Run from the clone: .venv/bin/python tests/cases/data/C30/check_classifier.py
import importlib.util
spec = importlib.util.spec_from_file_location("vm", "servers/responses_api_models/vllm_model/app.py")
vm = importlib.util.module_from_spec(spec); spec.loader.exec_module(vm)
msgs = {"v0 'maximum context length'": "This model's maximum context length is 4096 tokens. However, you requested 5012 tokens.",
        "v0 'decoder prompt'": "The decoder prompt (length 5012) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens.",
        "v1 'prompt length'": "Prompt length of 4096 is longer than the maximum model length of 4096.",
        "'max_tokens' too large": "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 4096 tokens."}
for label, text in msgs.items():
    print(f"{label:28s} -> treated as context length: {vm._is_context_length_error(400, {'object': 'error', 'message': text})}")
