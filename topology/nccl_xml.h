#pragma once
// Reader for NCCL topology files (the format of NCCL_TOPO_FILE and NCCL_TOPO_DUMP_FILE):
//
//   <system version="1">
//     <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" modelid="143">
//       <pci busid="ffff:ff:01.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
//         <pci busid="0000:1b:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
//           <gpu dev="0" sm="90" rank="0" gdr="1">
//             <nvlink target="0000:05:00.0" count="5" tclass="0x068000"/>
//           </gpu>
//         </pci>
//         <pci busid="0000:1c:00.0" class="0x020700" ...>
//           <nic><net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/></nic>
//         </pci>
//       </pci>
//     </cpu>
//   </system>
//
// Unknown elements and attributes are ignored (NCCL adds some in every release); values
// that are present but malformed are errors naming the file and line.

#include <string>

#include "common/status.h"
#include "topology/graph.h"
#include "topology/xml.h"

namespace braid::topology {

// Builds a finalized graph from a parsed NCCL topology document. `source` names the file
// in error messages.
[[nodiscard]] StatusOr<Graph> graphFromNcclXml(const XmlElement& root, const std::string& source);
// Parses `text` and builds the graph.
[[nodiscard]] StatusOr<Graph> parseNcclTopo(const std::string& text, const std::string& source);
// Reads `path` and builds the graph.
[[nodiscard]] StatusOr<Graph> loadNcclTopoFile(const std::string& path);

}  // namespace braid::topology
