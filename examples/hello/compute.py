"""Something small but real to compute: digits of pi (Machin's formula, integer arithmetic)."""
import hashlib
import sys
import time


def arctan_inv(x: int, scale: int) -> int:
    total = term = scale // x
    x2, n, sign = x * x, 3, -1
    while term:
        term //= x2
        total += sign * (term // n)
        n += 2
        sign = -sign
    return total


def pi_digits(digits: int) -> str:
    scale = 10 ** (digits + 10)
    pi = 4 * (4 * arctan_inv(5, scale) - arctan_inv(239, scale))
    return str(pi)[: digits + 1]


def main() -> None:
    digits = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    start = time.perf_counter()
    pi = pi_digits(digits)
    elapsed = time.perf_counter() - start
    print(f"pi to {digits} digits: 3.{pi[1:21]}... (sha256 {hashlib.sha256(pi.encode()).hexdigest()[:16]})")
    print(f"computed in {elapsed * 1000:.1f} ms")


if __name__ == "__main__":
    main()
