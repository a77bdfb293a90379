package duration

import (
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDuration(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "30s", want: 30 * time.Second},
		{in: "5m", want: 5 * time.Minute},
		{in: "90", want: 90 * time.Second},
		{in: "soon", bad: true},
		{in: "[1]", bad: true},
	}
	for _, tc := range cases {
		var v struct {
			D Duration `yaml:"d"`
		}
		err := yaml.Unmarshal([]byte("d: "+tc.in), &v)
		if tc.bad != (err != nil) || (!tc.bad && v.D.D() != tc.want) {
			t.Errorf("%q: got %v, %v", tc.in, v.D.D(), err)
		}
	}
}
