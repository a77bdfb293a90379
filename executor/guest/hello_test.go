package guest

import "testing"

// The nonce of a FrameHello comes from the host, but the hello line it
// goes into is read line by line: nothing in it may end or fake a line.
func TestHelloNonce(t *testing.T) {
	long := make([]byte, 200)
	for i := range long {
		long[i] = 'a'
	}
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"hex", []byte("0123abcdef"), "0123abcdef"},
		{"empty", nil, ""},
		{"newline", []byte("ab\nSANDBOXAPI-AGENT 10 x"), "abSANDBOXAPIAGENT10x"},
		{"spaces and controls", []byte("a b\x00c\rd\te"), "abcde"},
		{"non-ascii", []byte("é1"), "1"},
		{"capped", long, string(long[:64])},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := helloNonce(tc.in); got != tc.want {
				t.Fatalf("helloNonce(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
