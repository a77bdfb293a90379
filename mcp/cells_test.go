package mcp

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// FuzzCellContent feeds kernel results, which the sandboxed program
// controls, to the conversion: it never panics, the text stays bounded,
// and every image it attaches is within the limits and really of the
// type it claims.
func FuzzCellContent(f *testing.F) {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	f.Add(`[{"type":"display_data","is_main_result":false,"data":{"image/png":"`+png+`","text/plain":"fig"}}]`, "ValueError", "\x1b[31mboom\x1b[0m")
	f.Add(`[{"type":"execute_result","is_main_result":true,"data":{"text/plain":["a","b"],"application/json":{"k":[1,2]}}}]`, "", "")
	f.Add(`[{"type":"x","data":{"image/png":"!!","image/jpeg":5,"image/svg+xml":"<svg/>","text/html":"<b>"}}]`, "E", "")
	f.Add(`[{"data":{"image/gif":"R0lGODlhAQABAAAAACw="}},{"data":null}]`, "", "")
	f.Fuzz(func(t *testing.T, results, errName, traceback string) {
		r := ExecuteResult{Status: sandbox.StatusOK}
		if json.Unmarshal([]byte(results), &r.Results) != nil {
			return
		}
		if errName != "" {
			r.Status = sandbox.StatusError
			r.Error = &wire.CellError{Name: errName, Value: traceback, Traceback: []string{traceback, traceback}}
		}
		res := cellContent(r)
		tc, ok := res.Content[0].(*sdk.TextContent)
		if !ok || len(tc.Text) > maxCellText+200 {
			t.Fatalf("first content %T of %d bytes", res.Content[0], len(tc.Text))
		}
		if len(res.Content) > 1+maxImages {
			t.Fatalf("%d images", len(res.Content)-1)
		}
		for _, c := range res.Content[1:] {
			img, ok := c.(*sdk.ImageContent)
			if !ok || !imageTypes[img.MIMEType] || len(img.Data) > maxImageBytes || http.DetectContentType(img.Data) != img.MIMEType {
				t.Fatalf("attached %T %s", c, describeContent(c))
			}
		}
		if strings.Contains(tc.Text, "\x1b") && !strings.Contains(results, "\x1b") && !strings.Contains(strings.ToLower(results), `\u001b`) {
			t.Fatalf("a terminal escape came from nowhere: %q", tc.Text)
		}
		_ = capResults(r)
	})
}

func describeContent(c sdk.Content) string {
	if img, ok := c.(*sdk.ImageContent); ok {
		return img.MIMEType + " of " + http.DetectContentType(img.Data)
	}
	return "?"
}

// TestCellContentBoundsText: many large results are cut to maxCellText.
func TestCellContentBoundsText(t *testing.T) {
	t.Parallel()
	r := ExecuteResult{Status: sandbox.StatusOK}
	for range 20 {
		r.Results = append(r.Results, wire.CellResult{Type: "display_data", Data: map[string]any{"text/plain": strings.Repeat("z", textCap+5)}})
	}
	txt := text(cellContent(r))
	if len(txt) > maxCellText+200 || !strings.Contains(txt, "every result is in the structured result") {
		t.Fatalf("text of %d bytes", len(txt))
	}
	if c := capResults(r); !c.Truncated || len(c.Results[0].Data["text/plain"].(string)) != textCap || len(r.Results[0].Data["text/plain"].(string)) != textCap+5 {
		t.Fatal("capResults did not cut a copy of the values")
	}
}
