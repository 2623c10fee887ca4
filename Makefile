# The two commands of the README's quick start:
#   make demo   installs dependencies, builds, and runs examples/hello.yaml end to end
#   make test   installs dependencies, builds, and runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build demo test test-asan format clean

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@ninja -C $(BUILD) -j $(JOBS)

demo: build
	@./scripts/demo.sh

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer (CI runs it too).
test-asan: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
	@ninja -C build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) --timeout 600

format:
	@find src tests bench -name '*.cc' -o -name '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan
