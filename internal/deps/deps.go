//go:build tools

// Package deps pins modules the project adopts before the code that imports
// them lands, so parallel work does not race on go.mod. An entry goes once
// real code imports its module.
package deps

import (
	_ "github.com/chromedp/chromedp"
	_ "github.com/coder/websocket"
)
