package mcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// A kernel cell's reply carries rich results (Jupyter MIME bundles). The
// tool's structured result keeps them as the API sent them (text values
// capped); its content is what an assistant reads: text for the text
// types, and image content for a raster image, so the assistant sees a
// plot instead of a page of base64.

// imageTypes are the raster types MCP clients show as images, in the order
// a bundle's first one is picked.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

var imageOrder = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// textTypes are the bundle types shown as text, most readable first; the
// first one present is shown.
var textTypes = []string{"text/markdown", "text/plain", "application/json", "text/html"}

const (
	// maxImages bounds the images one tool result carries.
	maxImages = 8
	// maxImageBytes bounds one image (decoded): the largest image the
	// common assistants' models take is about 5 MB.
	maxImageBytes = 5 << 20
	// maxCellText bounds the text of one reply: each stream and result
	// is cut at textCap, and a cell may display many results.
	maxCellText = 8 * textCap
)

// cellContent is the content of an execute reply for a reader: a kernel
// restart first (the agent must not believe lost variables exist), the
// status and streams, each result's text, the error with its traceback,
// then each result's image as image content.
func cellContent(r ExecuteResult) *sdk.CallToolResult {
	var b strings.Builder
	if r.KernelRestarted {
		b.WriteString("kernel restarted: the kernel had died (out of memory or exited) and was started fresh before this cell; " +
			"variables, imports and data of earlier cells are gone\n")
	}
	if r.Error != nil && r.Status == sandbox.StatusError {
		fmt.Fprintf(&b, "status error: the cell raised %s in %d ms", capText(stripANSI(r.Error.Name)), r.DurationMS)
		if r.Truncated {
			b.WriteString("\n(output truncated at the cap)")
		}
		writeStream(&b, "stdout", r.Stdout)
		writeStream(&b, "stderr", r.Stderr)
	} else {
		b.WriteString(describeExecution(r))
	}
	var images []sdk.Content
	for i, cr := range r.Results {
		label := "display"
		if cr.IsMainResult {
			label = "result"
		}
		fmt.Fprintf(&b, "\n--- %s %d ---", label, i+1)
		if text, ok := bundleText(cr.Data); ok {
			b.WriteString("\n")
			b.WriteString(text)
		}
		if img, note := bundleImage(cr.Data, len(images)); img != nil {
			images = append(images, img)
			fmt.Fprintf(&b, "\n[%s, %d bytes: image %d below]", img.MIMEType, len(img.Data), len(images))
		} else if note != "" {
			fmt.Fprintf(&b, "\n[%s]", note)
		}
		if v, ok := cr.Data["image/svg+xml"]; ok {
			fmt.Fprintf(&b, "\n[image/svg+xml, %d bytes: in the structured result]", len(valueText(v)))
		}
	}
	if r.Error != nil {
		fmt.Fprintf(&b, "\n--- error ---\n%s: %s", stripANSI(r.Error.Name), capText(stripANSI(r.Error.Value)))
		if tb := stripANSI(strings.Join(r.Error.Traceback, "\n")); tb != "" {
			b.WriteString("\n")
			b.WriteString(capText(tb))
		}
	}
	text := b.String()
	if len(text) > maxCellText {
		text = strings.ToValidUTF8(text[:maxCellText], "") + fmt.Sprintf("\n[... %d more bytes cut; every result is in the structured result]", len(text)-maxCellText)
	}
	return &sdk.CallToolResult{Content: append([]sdk.Content{&sdk.TextContent{Text: text}}, images...)}
}

// bundleText is the first text type of a bundle, capped.
func bundleText(data map[string]any) (string, bool) {
	for _, mt := range textTypes {
		if v, ok := data[mt]; ok {
			return capText(strings.TrimRight(valueText(v), "\n")), true
		}
	}
	return "", false
}

// valueText is a bundle value as text: a string, a list of strings (a
// notebook's multi-line form), or JSON.
func valueText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, s := range v {
			if s, ok := s.(string); ok {
				b.WriteString(s)
				continue
			}
			return jsonText(v)
		}
		return b.String()
	default:
		return jsonText(v)
	}
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// bundleImage is a bundle's first raster image as image content, if it is
// base64 of an image of its stated type within the limits; otherwise a
// note that says why it is left out (empty when the bundle has none).
// have is how many images the result carries already.
func bundleImage(data map[string]any, have int) (*sdk.ImageContent, string) {
	for _, mt := range imageOrder {
		v, ok := data[mt]
		if !ok {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return nil, mt + " left out: not a base64 string"
		}
		// base64 of maxImageBytes is about 4/3 of it: refuse more before
		// decoding anything.
		if len(s) > maxImageBytes/3*4+4096 {
			return nil, fmt.Sprintf("%s left out: over %d bytes", mt, maxImageBytes)
		}
		img, err := base64.StdEncoding.DecodeString(stripSpace(s))
		if err != nil {
			return nil, mt + " left out: not valid base64"
		}
		if got := http.DetectContentType(img); got != mt {
			return nil, fmt.Sprintf("%s left out: the data is %s", mt, got)
		}
		if len(img) > maxImageBytes {
			return nil, fmt.Sprintf("%s left out: %d bytes, over %d", mt, len(img), maxImageBytes)
		}
		if have >= maxImages {
			return nil, fmt.Sprintf("%s left out: at most %d images per call (all are in the structured result)", mt, maxImages)
		}
		return &sdk.ImageContent{Data: img, MIMEType: mt}, ""
	}
	return nil, ""
}

// stripSpace drops the line breaks and spaces base64 may be wrapped with.
func stripSpace(s string) string {
	if !strings.ContainsAny(s, " \t\r\n") {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\r', '\n':
			return -1
		}
		return r
	}, s)
}

// ansiSeq matches a terminal escape sequence (CSI), which IPython puts in
// tracebacks to colour them.
var ansiSeq = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]`)

// stripANSI removes the escape sequences, and any lone escape left.
func stripANSI(s string) string {
	return strings.ReplaceAll(ansiSeq.ReplaceAllString(s, ""), "\x1b", "")
}

// capText cuts s at textCap, saying so.
func capText(s string) string {
	if len(s) <= textCap {
		return s
	}
	return strings.ToValidUTF8(s[:textCap], "") + fmt.Sprintf("\n[... %d more bytes cut]", len(s)-textCap)
}

// capResults cuts every text value of r's results at textCap, as the
// streams are cut (marking r truncated); images stay whole.
func capResults(r ExecuteResult) ExecuteResult {
	if len(r.Results) == 0 {
		return r
	}
	out := make([]wire.CellResult, len(r.Results))
	for i, cr := range r.Results {
		data := make(map[string]any, len(cr.Data))
		for mt, v := range cr.Data {
			if s, ok := v.(string); ok && !imageTypes[mt] && len(s) > textCap {
				v, r.Truncated = strings.ToValidUTF8(s[:textCap], ""), true
			}
			data[mt] = v
		}
		cr.Data = data
		out[i] = cr
	}
	r.Results = out
	return r
}
