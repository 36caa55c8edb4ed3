# Two entry points for a fresh clone (see README.md): `make demo` and `make test`.
# Both create .venv from the pinned requirements-dev.txt (runtime pins included) on first use.

# A target whose recipe failed is removed (not left looking done), so the next make redoes it.
.DELETE_ON_ERROR:

VENV := .venv
PYTHON := $(VENV)/bin/python
DATA_DIR ?= ../shared/data/multi30k
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install demo test test-fast test-long test-onednn-off check-imports lint train-multi30k train-multi30k-long train-multi30k-ensemble \
	table3-multi30k

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt
	$(VENV)/bin/pip install --quiet --no-deps --editable .
	touch $@

# The main job: tokenize Multi30k EN->DE once into shards (`prepare`, shared with the recipes
# below; a rerun is a no-op), train the `multi30k` preset on them for DEMO_STEPS updates compiled
# with XLA (the preset and setting that learn fastest here: docs/RESULTS.md), average its last
# checkpoints, beam-decode and score the test split, translate two sentences, draw their
# attention, and export a SavedModel for TensorFlow Serving. A number of updates, not minutes:
# the model translates as well on a slow or loaded machine, only later. Rerunning resumes, and
# DEMO_STEPS=N trains on to N.
M30K_PREPARED ?= runs/prepared
M30K_VOCAB_SIZE := 8000
DEMO_RUN ?= runs/demo
DEMO_STEPS ?= 1000
# Without $(DATA_DIR), `prepare` downloads Multi30k into $$KT_DATA_HOME/multi30k.
M30K_TEXT = $(if $(wildcard $(DATA_DIR)),--data-dir $(DATA_DIR))
demo: install
	$(MAKE) --no-print-directory $(call m30k_data,de)/manifest.json
	$(PYTHON) -m keras_transformer train --preset multi30k --data $(call m30k_data,de) \
		--output $(DEMO_RUN) --jit-compile --max-steps $(DEMO_STEPS) --checkpoint-every 100 \
		--bleu-every 0 --log-every 50
	$(PYTHON) -m keras_transformer average $(DEMO_RUN) --last 3
	$(PYTHON) -m keras_transformer evaluate --model $(DEMO_RUN) --split test_2016_flickr \
		--beam 4 --alpha 0.6 --jit-compile
	printf 'A man in a blue shirt is riding a bike.\nTwo dogs play in the snow.\n' | \
		$(PYTHON) -m keras_transformer translate --model $(DEMO_RUN)
	$(PYTHON) -m keras_transformer attention --model $(DEMO_RUN) \
		--sentence 'A man in a blue shirt is riding a bike.' --output $(DEMO_RUN)/attention.png
	$(PYTHON) -m keras_transformer export --model $(DEMO_RUN) --output saved_models/demo

# Every Multi30k recipe below trains on Multi30k EN-><tgt> prepared once (`prepare`; a rerun is a
# no-op) into $(M30K_PREPARED)/multi30k-en<tgt>: the training pairs' shards, the shared BPE
# vocabulary of the `multi30k` preset's 8,000 entries learned from them as `train --data-dir`
# learned it, and the text of val and test_2016_flickr, which evaluation scores.
m30k_data = $(M30K_PREPARED)/multi30k-en$(1)
# Kept: make would otherwise delete a manifest it made on the way, as an intermediate file.
.PRECIOUS: $(M30K_PREPARED)/multi30k-en%/manifest.json

$(M30K_PREPARED)/multi30k-en%/manifest.json: | install
	$(PYTHON) -m keras_transformer prepare --dataset multi30k $(M30K_TEXT) --src-lang en \
		--tgt-lang $* --vocab-size $(M30K_VOCAB_SIZE) --output $(@D)

# Multi30k recipe (docs/RESULTS.md): train the `multi30k` preset EN->DE and EN->FR for
# M30K_MINUTES each or until 10 epochs have not lowered the validation loss (rerunning
# resumes), average the last 5 checkpoints, and score
# test_2016_flickr greedy and beam 4 on the final weights and beam 4 on the average. Hypotheses
# and scores go to $(M30K_RUNS)/multi30k-en<tgt>/eval/, a learning curve to learning_curve.png.
# M30K_FLAGS passes more flags to `train`, e.g. M30K_FLAGS="--set residual_dropout=0.2".
M30K_MINUTES ?= 50
M30K_FLAGS ?=
M30K_RUNS ?= runs
M30K_TARGETS ?= de fr
train-multi30k: $(foreach target,$(M30K_TARGETS),$(M30K_RUNS)/multi30k-en$(target)/learning_curve.png)

# `train` of the recipe, into run directory $(1) for target language $(2), on prepared directory
# $(3) (default Multi30k EN-><$(2)>'s). An evaluation scores a run on the text of the corpus it was
# trained on, val and test_2016_flickr of Multi30k (and of its distilled copy).
M30K_TRAIN = $(PYTHON) -m keras_transformer train --preset multi30k \
	--data $(or $(3),$(call m30k_data,$(2))) --output $(1) --jit-compile \
	--checkpoint-every 100 --keep-checkpoints 10 --bleu-every 300

# In the rule, $(@D) is the run directory and $* the target language.
$(M30K_RUNS)/multi30k-en%/learning_curve.png: install $(M30K_PREPARED)/multi30k-en%/manifest.json
	$(call M30K_TRAIN,$(@D),$*) --max-minutes $(M30K_MINUTES) --patience 10 $(M30K_FLAGS)
	$(PYTHON) -m keras_transformer average $(@D) --last 5
	for beam in 1 4; do \
		$(PYTHON) -m keras_transformer evaluate --model $(@D) --beam $$beam \
			--weights $(@D)/model.weights.h5 --split test_2016_flickr || exit 1; \
	done
	$(PYTHON) -m keras_transformer evaluate --model $(@D) --beam 4 \
		--weights $(@D)/averaged-last5.weights.h5 --split test_2016_flickr
	$(PYTHON) -m keras_transformer curve $(@D)

# The recipe's best single model (docs/RESULTS.md; 2 to 4.5 hours here): the recipe until its
# validation loss flattens (M30K_SWITCH_STEP updates, or --patience 10 before), then updates of
# 8,192 tokens, the published recipe's size, to M30K_LAST_STEP: their final weights are less
# noisy. The last 10 checkpoints averaged, beam 4 on the validation split at each length
# penalty of M30K_ALPHAS, then on test_2016_flickr at the best of them and at the paper's 0.6.
# A rerun resumes the phase it was in; `first-phase.done` marks the switch.
M30K_LONG_RUNS ?= runs/long
M30K_SWITCH_STEP ?= 8500
M30K_LAST_STEP ?= 10660
M30K_ALPHAS ?= 0.6 1.0 1.3 1.6 2.0
# The first phase into run directory $(1) for target language $(2), and the second's updates.
M30K_FIRST_PHASE = $(call M30K_TRAIN,$(1),$(2)) --max-steps $(M30K_SWITCH_STEP) --patience 10
M30K_LARGE_UPDATES := --set batch_tokens=8192 --allow-training-changes
train-multi30k-long: $(foreach target,$(M30K_TARGETS),$(M30K_LONG_RUNS)/multi30k-en$(target)/learning_curve.png)
# Kept: make would otherwise delete the mark as an intermediate file, and a rerun retrain.
.PRECIOUS: $(M30K_LONG_RUNS)/multi30k-en%/first-phase.done

$(M30K_LONG_RUNS)/multi30k-en%/first-phase.done: | install \
		$(M30K_PREPARED)/multi30k-en%/manifest.json
	$(call M30K_FIRST_PHASE,$(@D),$*) $(M30K_FLAGS)
	touch $@

$(M30K_LONG_RUNS)/multi30k-en%/learning_curve.png: $(M30K_LONG_RUNS)/multi30k-en%/first-phase.done
	$(call M30K_TRAIN,$(@D),$*) --max-steps $(M30K_LAST_STEP) $(M30K_LARGE_UPDATES) $(M30K_FLAGS)
	$(PYTHON) -m keras_transformer average $(@D) --last 10
	for tuning in "--tune-alpha $(M30K_ALPHAS)" ""; do \
		$(PYTHON) -m keras_transformer evaluate --model $(@D) --split test_2016_flickr $$tuning \
			--weights $(@D)/averaged-last10.weights.h5 --jit-compile || exit 1; \
	done
	$(PYTHON) -m keras_transformer curve $(@D)

# The best EN->DE of docs/RESULTS.md (the 42.0 target's; about 7 hours here): five models
# ensembled, beam 4, α 0.6, each its last 10 checkpoints averaged. The long schedule twice to
# KD_STEP, `narrow` as train-multi30k-long trains it and `attrelu` with attention and ReLU dropout
# 0.1 from the first update; `late-dropout`, a copy of `narrow` given that dropout to
# KD_LATE_STEP. Those three translate the training sources (`distill`: sequence-level knowledge
# distillation, the text Multi30k EN->DE was prepared from), prepared with the vocabulary they
# were trained with, and two students resume on the references plus those translations: a copy of
# `narrow` to KD_STUDENT_STEP, and a copy of `attrelu` (trained on to KD_ATTRELU_STEP first) to
# KD_STUDENT2_STEP. The five decode validation and test_2016_flickr into $(KD_RUNS)/eval/,
# the first student alone into $(KD_RUNS)/student/eval/. Every stage's weights file marks it
# done, so a rerun resumes the stage it was in. M30K_FLAGS passes more flags to every `train`.
KD_RUNS ?= runs/ensemble-ende
KD_STEP ?= 10200
KD_LATE_STEP ?= 11200
KD_STUDENT_STEP ?= 13200
KD_ATTRELU_STEP ?= 10660
KD_STUDENT2_STEP ?= 11660
KD_DROPOUT := --set attention_dropout=0.1 --set relu_dropout=0.1
kd_weights = $(KD_RUNS)/$(1)/step$(2)-averaged-last10.weights.h5
KD_NARROW := $(call kd_weights,narrow,$(KD_STEP))
KD_ATTRELU := $(call kd_weights,attrelu,$(KD_STEP))
KD_LATE := $(call kd_weights,late-dropout,$(KD_LATE_STEP))
KD_STUDENT := $(call kd_weights,student,$(KD_STUDENT_STEP))
KD_STUDENT2 := $(call kd_weights,student-attrelu,$(KD_STUDENT2_STEP))
KD_DATA := $(KD_RUNS)/distilled-data
KD_PREPARED := $(KD_RUNS)/distilled-prepared
KD_AVERAGE = $(PYTHON) -m keras_transformer average $(@D) --last 10 --output $@
# The run directory $(@D) as a copy of run $(1), unless an earlier try made it.
kd_copy = test -d $(@D) || { cp -a $(1) $(@D).partial && mv $(@D).partial $(@D); }
KD_EVALUATE = $(PYTHON) -m keras_transformer evaluate --beam 4 --jit-compile

train-multi30k-ensemble: $(KD_RUNS)/eval/test_2016_flickr.beam4.alpha0.6.scores.json
.PRECIOUS: $(KD_RUNS)/%/first-phase.done

$(KD_RUNS)/attrelu/%: KD_FLAGS = $(KD_DROPOUT)

$(KD_RUNS)/%/first-phase.done: | install $(call m30k_data,de)/manifest.json
	$(call M30K_FIRST_PHASE,$(@D),de) $(KD_FLAGS) $(M30K_FLAGS)
	touch $@

$(KD_RUNS)/%/step$(KD_STEP)-averaged-last10.weights.h5: $(KD_RUNS)/%/first-phase.done
	$(call M30K_TRAIN,$(@D),de) --max-steps $(KD_STEP) $(M30K_LARGE_UPDATES) $(KD_FLAGS) \
		$(M30K_FLAGS)
	$(KD_AVERAGE)

$(KD_LATE): $(KD_NARROW)
	$(call kd_copy,$(<D))
	$(call M30K_TRAIN,$(@D),de) --max-steps $(KD_LATE_STEP) $(M30K_LARGE_UPDATES) $(KD_DROPOUT) \
		$(M30K_FLAGS)
	$(KD_AVERAGE)

$(KD_DATA)/distillation.json: $(KD_ATTRELU) $(KD_LATE) $(KD_NARROW)
	$(PYTHON) -m keras_transformer distill --model $(<D) --weights $< \
		--ensemble $(wordlist 2,3,$^) --jit-compile --output $(@D)

# The students resume the teachers' weights: their ids must be the teachers' vocabulary's.
$(KD_PREPARED)/manifest.json: $(KD_DATA)/distillation.json
	$(PYTHON) -m keras_transformer prepare --dataset multi30k --data-dir $(<D) --src-lang en \
		--tgt-lang de --subwords $(call m30k_data,de)/subwords.model --output $(@D)

$(KD_STUDENT): $(KD_NARROW) $(KD_PREPARED)/manifest.json
	$(call kd_copy,$(<D))
	$(call M30K_TRAIN,$(@D),de,$(KD_PREPARED)) --max-steps $(KD_STUDENT_STEP) $(M30K_LARGE_UPDATES) \
		$(KD_DROPOUT) $(M30K_FLAGS)
	$(KD_AVERAGE)
	for split in val test_2016_flickr; do \
		$(KD_EVALUATE) --model $(@D) --weights $@ --split $$split || exit 1; \
	done

$(KD_STUDENT2): $(KD_ATTRELU) $(KD_PREPARED)/manifest.json
	$(call M30K_TRAIN,$(<D),de) --max-steps $(KD_ATTRELU_STEP) $(M30K_LARGE_UPDATES) $(KD_DROPOUT) \
		$(M30K_FLAGS)
	$(call kd_copy,$(<D))
	$(call M30K_TRAIN,$(@D),de,$(KD_PREPARED)) --max-steps $(KD_STUDENT2_STEP) $(M30K_LARGE_UPDATES) \
		$(KD_DROPOUT) $(M30K_FLAGS)
	$(KD_AVERAGE)

$(KD_RUNS)/eval/test_2016_flickr.beam4.alpha0.6.scores.json: $(KD_ATTRELU) $(KD_LATE) \
		$(KD_NARROW) $(KD_STUDENT) $(KD_STUDENT2)
	for split in val test_2016_flickr; do \
		$(KD_EVALUATE) --model $(<D) --weights $< --ensemble $(wordlist 2,5,$^) --split $$split \
			--output $(@D) || exit 1; \
	done

# Table 3 (§6.2) at the scale of the Multi30k recipe (keras_transformer/analysis/model_variations.py): the
# `multi30k` preset EN->DE, and the same with each TABLE3_ROWS row's change, each trained for
# TABLE3_STEPS updates (about the recipe's 50 minutes in this machine's fast state: the paper
# compares its rows at equal steps) and beam-decoded on the validation split from its final
# weights, as the paper scores Table 3 on its development set. Then the table of BLEU differences
# beside the paper's, into $(TABLE3_RUNS)/table3.md, and its plot into table3.png. Rerunning skips
# the runs already scored.
# The rows, `recipe` and the scores path are model_variations.py's (tests/test_model_variations.py).
TABLE3_ROWS ?= A-h1 C-N2 D-drop0.0 D-ls0.0 E-learned
TABLE3_STEPS ?= 2800
TABLE3_RUNS ?= runs/table3
TABLE3_SCORES := eval/model/validation.beam4.alpha0.6.scores.json
table3-multi30k: $(TABLE3_RUNS)/table3.md

$(TABLE3_RUNS)/table3.md: $(foreach run,recipe $(TABLE3_ROWS),$(TABLE3_RUNS)/$(run)/$(TABLE3_SCORES))
	$(PYTHON) -m keras_transformer variations $(TABLE3_RUNS) --rows $(TABLE3_ROWS) \
		--plot $(@D)/table3.png > $@
	cat $@

# $* is the row, or `recipe` for the unchanged preset.
$(TABLE3_RUNS)/%/$(TABLE3_SCORES): | install $(call m30k_data,de)/manifest.json
	$(PYTHON) -m keras_transformer train --preset multi30k --data $(call m30k_data,de) \
		--output $(TABLE3_RUNS)/$* $(if $(filter-out recipe,$*),--variation $*) \
		--jit-compile --max-steps $(TABLE3_STEPS) --checkpoint-every 100 --bleu-every 300
	$(PYTHON) -m keras_transformer evaluate --model $(TABLE3_RUNS)/$* --split val --beam 4 \
		--weights $(TABLE3_RUNS)/$*/model.weights.h5

# The layering contract (pyproject.toml [tool.importlinter]) and the declared dependencies
# (deptry: every import declared in pyproject.toml, nothing declared unused).
check-imports: install
	$(VENV)/bin/lint-imports
	$(VENV)/bin/deptry .

# One test process a core (at most 4), each given whole files so that a module's fixtures (an
# export, a trained run) are built once; the files with slow tests first (tests/conftest.py).
PYTEST_PARALLEL := -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder
# The suite, less the tests marked long: end-to-end runs whose behaviour cheaper tests named in
# their mark prove (tests/test_test_selection.py checks that those exist and run here).
test: check-imports
	$(PYTHON) -m pytest -q $(PYTEST_PARALLEL) -m "not long"

# The tests marked long (.ci/run runs them after `make test`).
test-long: install
	$(PYTHON) -m pytest -q $(PYTEST_PARALLEL) -m long

# `make test` without the tests marked slow (subprocess training, multi-worker, XLA, TFLite).
test-fast: check-imports
	$(PYTHON) -m pytest -q $(PYTEST_PARALLEL) -m "not slow and not long"

# `make test` with TensorFlow's oneDNN kernels off, as TensorFlow leaves them on CPUs without
# AVX-512 VNNI, BF16 or AMX (`make test` runs with them on, as the CLI does:
# keras_transformer/runtime.py); .ci/run runs both.
test-onednn-off: install
	TF_ENABLE_ONEDNN_OPTS=0 $(PYTHON) -m pytest -q $(PYTEST_PARALLEL) -m "not long"

lint: install
	$(VENV)/bin/ruff check keras_transformer pipelines durable_files tests benchmarks examples
	$(VENV)/bin/ruff format --check keras_transformer pipelines durable_files tests benchmarks examples
