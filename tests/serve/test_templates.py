#!/usr/bin/env python3
"""serve/template.c against the models' own chat templates rendered by jinja2, as transformers'
apply_chat_template renders them (a sandboxed environment with trim_blocks and lstrip_blocks,
add_generation_prompt true). The Jinja texts are the ones published in each model's
tokenizer_config.json; BOS is left to the tokenizer, so one leading bos_token is dropped from jinja2's text.
Each Jinja text must also be recognised as its family (serve_template_detect).
usage: test_templates.py --tool build/tests/render_template"""
import argparse
import json
import subprocess
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment

# name -> (source, jinja text, bos, eos, takes a system message)
TEMPLATES = {
    "chatml": ("teknium/OpenHermes-2.5-Mistral-7B",
               "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", "<s>", "<|im_end|>", True),
    "llama2": ("meta-llama/Llama-2-7b-chat-hf",
               "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
               "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
               "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
               "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = "
               "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}"
               "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
               "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
               "<s>", "</s>", True),
    "llama3": ("meta-llama/Meta-Llama-3-8B-Instruct",
               "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
               "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
               "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}", "<|begin_of_text|>", "<|eot_id|>", True),
    "mistral": ("mistralai/Mistral-7B-Instruct-v0.2",
                "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
                "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
                "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are "
                "supported!') }}{% endif %}{% endfor %}", "<s>", "</s>", False),
    "phi3": ("microsoft/Phi-3.5-mini-instruct",
             "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\\n' + "
             "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + "
             "'<|end|>\\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}"
             "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}",
             "<s>", "<|endoftext|>", True),
    "gemma": ("google/gemma-7b-it",
              "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
              "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception("
              "'Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == "
              "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + "
              "role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
              "{{'<start_of_turn>model\\n'}}{% endif %}", "<bos>", "<eos>", False),
    "zephyr": ("HuggingFaceH4/zephyr-7b-beta",
               "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
               "{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] "
               "== 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
               "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}", "<s>", "</s>", True),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant"}
TURNS = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
         {"role": "user", "content": "Who are you"}, {"role": "assistant", "content": "   I am an assistant   "},
         {"role": "user", "content": "Another question"}]


def jinja(text, bos, eos, messages):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise ValueError(msg)
    env.globals["raise_exception"] = raise_exception
    out = env.from_string(text).render(messages=messages, bos_token=bos, eos_token=eos, add_generation_prompt=True)
    return out[len(bos):] if out.startswith(bos) else out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    a = ap.parse_args()
    fails = 0
    for name, (source, text, bos, eos, system) in TEMPLATES.items():
        seen = subprocess.run([a.tool, "--detect"], input=text, capture_output=True, text=True, check=True).stdout.strip()
        fails += seen != name
        print(f"{'ok  ' if seen == name else 'FAIL'} {source}'s template is recognised as {name} ({seen})")
        for convo in ([SYSTEM] + TURNS, TURNS, TURNS[:1]) if system else (TURNS, TURNS[:1]):
            want = jinja(text, bos, eos, convo)
            got = subprocess.run([a.tool, name], input=json.dumps({"messages": convo}), capture_output=True, text=True,
                                 check=True).stdout
            ok = got == want
            fails += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name} ({source}), {len(convo)} messages")
            if not ok:
                print(f"     jinja2: {want!r}\n     qmap:   {got!r}")
    print(f"test_templates: {fails} failed" if fails else "test_templates: all passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
