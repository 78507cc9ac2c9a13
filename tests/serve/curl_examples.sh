# The README's curl examples for qmap serve, run as written by tests/serve/test_serve.py (which points them at
# its own port). Start the server first:  qmap serve kjv-q8.qmap --port 8080
curl -s http://127.0.0.1:8080/v1/completions -H 'Content-Type: application/json' \
     -d '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0}'
curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
     -d '{"messages": [{"role": "user", "content": "Who made the heaven and the earth?"}], "max_tokens": 32}'
curl -sN http://127.0.0.1:8080/v1/completions -H 'Content-Type: application/json' \
     -d '{"prompt": "And God said", "max_tokens": 16, "stream": true}'
curl -s http://127.0.0.1:8080/metrics | grep -E '^qmap_(requests_total|slots_busy|tokens_per_second) '
