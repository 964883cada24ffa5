"""`make pip-install-test`: run by the venv that `pip install .` made, from outside the repo, so
the `latent` imported is the installed wheel's. Runs the README's example on the demo model."""

import sys

import latent

assert "site-packages" in latent.__file__, latent.__file__
llm = latent.LLM(sys.argv[1])
out = llm.generate(["ROMEO.\nBut soft, what light"], latent.SamplingParams(temperature=0, max_tokens=24))
text = out[0].outputs[0].text
assert out[0].outputs[0].token_ids and text, out
print(f"pip install . works: latent from {latent.__file__}; greedy continuation: {text!r}")
