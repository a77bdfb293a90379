package mcp

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
)

// rawAPI answers each route with fixed bytes, as the REST API writes them.
type rawAPI map[string]string

func (a rawAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, ok := a[r.Method+" "+r.URL.Path]
	if !ok {
		writeErr(w, 404, "no_route", "no route", 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(body))
}

// TestMCPResultsAreTheAPIReplies checks that list_runtimes and
// check_packages hand the agent the API's reply with the same keys and
// values: the tools decode into the API's own types (package wire), so
// nothing is dropped or added. Before, mcp's copies had omitempty on
// versions and aliases, which the API always sends: a package without
// admitted versions ("versions": []) and a runtime without aliases
// ("aliases": null) lost the key.
func TestMCPResultsAreTheAPIReplies(t *testing.T) {
	t.Parallel()
	api := rawAPI{
		"GET /v1/runtimes": `{"runtimes":[{"language":"python3","aliases":["python","py"],"version":"3.13.5","compiled":false,` +
			`"versions":[{"version":"3.13.5","series":"3.13","default":true,"eol":"2029-10-31"}]},` +
			`{"language":"bash","aliases":null,"version":"5.2","compiled":false,"versions":[{"version":"5.2","series":"5.2","default":true}]}],` +
			`"limits":{"plan":"PRO","max_timeout":60,"memory_mb":512,"sessions":true,"max_sessions":2}}`,
		"POST /v1/packages/check": `{"manager":"pip","results":[` +
			`{"spec":"nothere","name":"nothere","available":false,"status":"not_found","versions":[],"osv":"unknown","reasons":["not in the mirror"]},` +
			`{"spec":"requests","name":"requests","version":"2.32.3","available":true,"status":"admitted","versions":["2.32.3"],"osv":"clean",` +
			`"osv_snapshot":"2026-12-01","install":"requests==2.32.3"}]}`,
	}
	cs := connectInMemory(t, Options{Handler: api, Key: goodKey})
	tests := []struct {
		tool, route string
		args        map[string]any
	}{
		{tool: "list_runtimes", route: "GET /v1/runtimes", args: map[string]any{}},
		{tool: "check_packages", route: "POST /v1/packages/check", args: map[string]any{"manager": "pip", "packages": []string{"nothere", "requests"}}},
	}
	for _, tt := range tests {
		res := call(t, cs, tt.tool, tt.args)
		if res.IsError {
			t.Fatalf("%s: %s", tt.tool, text(res))
		}
		got := structured[any](t, res)
		var want any
		if err := json.Unmarshal([]byte(api[tt.route]), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			t.Errorf("%s: structured result\n%s\nwant the API's reply\n%s", tt.tool, g, api[tt.route])
		}
	}
}
