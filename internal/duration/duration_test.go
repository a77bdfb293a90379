package duration

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDuration(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr error
	}{
		{name: "go form", in: "30s", want: 30 * time.Second},
		{name: "minutes", in: "5m", want: 5 * time.Minute},
		{name: "seconds", in: "90", want: 90 * time.Second},
		{name: "zero", in: "0", want: 0},
		{name: "negative zero", in: "-0s", want: 0},
		{name: "largest seconds", in: strconv.FormatInt(MaxSeconds, 10), want: time.Duration(MaxSeconds) * time.Second},
		{name: "seconds that used to wrap", in: "18446744074", wantErr: ErrTooLong},
		{name: "one past the largest", in: strconv.FormatInt(MaxSeconds+1, 10), wantErr: ErrTooLong},
		{name: "past int64", in: "99999999999999999999", wantErr: ErrTooLong},
		{name: "negative seconds", in: "-5", wantErr: ErrNegative},
		{name: "negative past int64", in: "-99999999999999999999", wantErr: ErrNegative},
		{name: "negative go form", in: "-5s", wantErr: ErrNegative},
		{name: "go form past range", in: "9999999999h", wantErr: ErrSyntax},
		{name: "word", in: "soon", wantErr: ErrSyntax},
		{name: "float seconds", in: "1.5", wantErr: ErrSyntax},
		{name: "sequence", in: "[1]", wantErr: ErrSyntax},
		{name: "mapping", in: "{a: 1}", wantErr: ErrSyntax},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v struct {
				D Duration `yaml:"d"`
			}
			err := yaml.Unmarshal([]byte("d: "+tc.in), &v)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("%q: got %v, %v; want %v", tc.in, v.D.D(), err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "line 1") {
					t.Fatalf("error %q does not name the line", err)
				}
				return
			}
			if err != nil || v.D.D() != tc.want {
				t.Fatalf("%q: got %v, %v; want %v", tc.in, v.D.D(), err, tc.want)
			}
		})
	}
}

// FuzzParse checks Parse against an oracle: no negative result and no
// error-free result that disagrees with the input read as whole seconds or
// as a Go duration; results survive a round trip through String.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"30s", "90", "0", "-5", "-5s", "18446744074", "9223372036", "9223372037", "1h2m3.5s", "+7", " 12 ", "1e3", "-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrNegative) && !errors.Is(err, ErrTooLong) && !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) error %v wraps no sentinel", s, err)
			}
			return
		}
		if v < 0 {
			t.Fatalf("Parse(%q) = %v without error", s, v)
		}
		trimmed := strings.TrimSpace(s)
		if secs, perr := strconv.ParseInt(trimmed, 10, 64); perr == nil {
			if secs < 0 || time.Duration(secs)*time.Second != v || v/time.Second != time.Duration(secs) {
				t.Fatalf("Parse(%q) = %v, want %d s", s, v, secs)
			}
		} else if want, perr := time.ParseDuration(trimmed); perr != nil || want != v {
			t.Fatalf("Parse(%q) = %v, time.ParseDuration = %v, %v", s, v, want, perr)
		}
		if back, err := Parse(v.String()); err != nil || back != v {
			t.Fatalf("round trip of %q: %v -> %q -> %v, %v", s, v, v.String(), back, err)
		}
	})
}

func TestHumanAge(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0 seconds", time.Second: "1 second", 59 * time.Second: "59 seconds", time.Minute: "1 minute",
		90 * time.Minute: "1 hour", 47 * time.Hour: "47 hours", 48 * time.Hour: "2 days", 88*24*time.Hour + 5*time.Hour: "88 days",
		-time.Second: "in the future",
	} {
		if got := Age(d); got != want {
			t.Errorf("Age(%s) = %q, want %q", d, got, want)
		}
	}
	if got := Human(850 * time.Millisecond); got != "850 ms" {
		t.Errorf("Human = %q", got)
	}
	if got := Human(4800 * time.Millisecond); got != "4.8 s" {
		t.Errorf("Human = %q", got)
	}
}
