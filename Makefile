# Thin wrapper over CMake.
#   make          build (Release) into build/
#   make test     build and run every test
#   make asan     build with AddressSanitizer + UBSan into build-asan/ and run the tests that are
#                 fast enough under it (the long fixture runs are covered by `make test`)
#   make check    test + asan: what CI runs
#   make cuda     the CUDA backend, its tests and deepinfer-cuda-bench into build-cuda/ (needs nvcc;
#                 the tests print SKIPPED without a GPU; tools/cuda/device_run.sh runs them on one)
BUILD ?= build
JOBS ?= $(shell nproc)
ASAN_SKIP ?= test_fixture_tiny|test_forward_chunked|test_tokenizer_hf|test_engram_token_map_hf|test_tokenizer_fuzz

.PHONY: all test asan check cuda clean
all:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

asan:
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDI_SANITIZE=ON >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -E '$(ASAN_SKIP)'

check: test asan

cuda:
	cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DDI_CUDA=ON >/dev/null
	cmake --build build-cuda -j $(JOBS) --target cuda_all

clean:
	rm -rf $(BUILD) build-asan build-cuda
