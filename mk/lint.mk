# mk/lint.mk — source checks that need no build: no C function over 120 lines outside the unpickler's
# dispatch and the listed exceptions (tests/tools/check_func_lengths.sh, tests/tools/func_lengths.allow).
func-length-test:
	sh tests/tools/check_func_lengths.sh 120
.PHONY: func-length-test
EXTRA_TESTS += func-length-test
