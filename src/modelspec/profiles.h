// profiles.h — the named model shapes: the published Flash shape and the small test profiles.
//
// Flash values come from MODEL.md §1 (they describe what the published files carry; nothing else in
// the code base should use them as constants). tiny-6 is MODEL.md §14.1; tiny-quant keeps tiny-6's
// schedule with E = F = 256 so every quantized format's block fits the rows (§14.2).
// Deliberately not here: type policies (inventory.h), tokenizers, payload generation.
#pragma once

#include <optional>
#include <string_view>

#include "modelspec/config.h"

namespace ds4::modelspec {

ModelConfig flash_config();       // 43 layers, E 4096, V 129280, … (validates)
ModelConfig tiny_config();        // "tiny-6": 6 layers [0,0,4,16,4,16], E 64, V 512, D 256, …
ModelConfig tiny_quant_config();  // tiny-6 with E = 256, F = 256 (Q8_0/K-quant rows fit)

}  // namespace ds4::modelspec
