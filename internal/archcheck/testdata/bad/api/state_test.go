package api

import "testing"

func TestX(t *testing.T) {
	limit = 2
}
