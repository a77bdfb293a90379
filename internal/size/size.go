// Package size parses the byte sizes of the config ("256M"). It does no
// I/O.
package size

import (
	"errors"
	"fmt"
	"math"
)

// Parse reads sizes like 512M, 1G, 1048576: a positive decimal number
// with an optional K, M or G suffix (binary multiples).
func Parse(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty size")
	}
	mult := int64(1)
	num := s
	switch s[len(s)-1] {
	case 'K', 'k':
		mult, num = 1<<10, s[:len(s)-1]
	case 'M', 'm':
		mult, num = 1<<20, s[:len(s)-1]
	case 'G', 'g':
		mult, num = 1<<30, s[:len(s)-1]
	}
	var n int64
	if _, err := fmt.Sscanf(num, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != num {
		return 0, fmt.Errorf("%q is not a size like 256M", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}
