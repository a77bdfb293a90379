package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

func TestUnknownField(t *testing.T) {
	t.Parallel()
	type inner struct {
		A string `json:"a"`
	}
	type Embedded struct {
		E int `json:"e"`
	}
	type outer struct {
		Embedded
		Name   string           `json:"name,omitempty"`
		Plain  int              // no tag: its Go name
		Skip   int              `json:"-"`
		In     *inner           `json:"in"`
		List   []inner          `json:"list"`
		ByName map[string]inner `json:"by_name"`
		Any    any              `json:"any"`
	}
	tests := []struct {
		name, body, want string
	}{
		{name: "known fields", body: `{"name":"x","Plain":1,"e":2,"in":{"a":"y"},"list":[{"a":"z"}],"by_name":{"k":{"a":"w"}},"any":{"free":1}}`},
		{name: "case-insensitive match", body: `{"NAME":"x","plain":1}`},
		{name: "null object", body: `{"in":null}`},
		{name: "top-level unknown", body: `{"name":"x","zeta":1,"alpha":2}`, want: "alpha"},
		{name: "dash-tagged is unknown", body: `{"Skip":1}`, want: "Skip"},
		{name: "nested object", body: `{"in":{"a":"y","b":1}}`, want: "b"},
		{name: "in an array", body: `{"list":[{"a":"y"},{"c":1}]}`, want: "c"},
		{name: "in a map value", body: `{"by_name":{"k":{"d":1}}}`, want: "d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := unknownField([]byte(tc.body), reflect.TypeFor[*outer]())
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("unknownField(%s) = %q, %t; want %q", tc.body, got, ok, tc.want)
			}
		})
	}
}

// FuzzUnknownFieldMatchesDecoder: for the request types the API decodes,
// unknownField finds an unknown key exactly when encoding/json's
// DisallowUnknownFields refuses the body (which says so only in its text,
// hence the comparison here, in a test).
func FuzzUnknownFieldMatchesDecoder(f *testing.F) {
	for _, s := range []string{
		`{"language":"python3","code":"print(1)","timeout":2,"env":{"A":"b"},"files":[{"path":"a","content":"b"}]}`,
		`{"language":"python3","x":1}`,
		`{"LANGUAGE":"bash","Code":"true"}`,
		`{"files":[{"path":"a","mode":"x"}]}`,
		`{"language":"python3","network":{"allow":["example.com"]}}`,
		`{"language":"python3","network":{"allow":["example.com"],"deny":1}}`,
		`{"manager":"pip","packages":["a==1"],"extra":null}`,
		`{"idle_ttl":60,"network":null}`,
		`[]`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	types := []reflect.Type{
		reflect.TypeFor[*wire.ExecuteRequest](), reflect.TypeFor[*wire.CreateSessionRequest](),
		reflect.TypeFor[*wire.ForkRequest](), reflect.TypeFor[*wire.PackagesRequest](), reflect.TypeFor[*wire.InstallRequest](),
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, typ := range types {
			if json.Unmarshal(body, reflect.New(typ.Elem()).Interface()) != nil {
				continue // refused before any field is looked at
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			err := dec.Decode(reflect.New(typ.Elem()).Interface())
			strict := err != nil && strings.HasPrefix(err.Error(), "json: unknown field")
			name, found := unknownField(body, typ)
			if strict != found {
				t.Fatalf("%s %s: decoder says %v, unknownField %q %t", typ, body, err, name, found)
			}
		}
	})
}
