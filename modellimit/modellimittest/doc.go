// Package modellimittest holds test helpers for package modellimit: a
// Clock that moves only when the test says.
package modellimittest
