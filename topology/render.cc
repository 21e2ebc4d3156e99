#include "topology/render.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

extern char** environ;

namespace braid::topology {

namespace {

std::string fmtBw(double gbps) {
  char buf[32];
  if (gbps >= 100) std::snprintf(buf, sizeof buf, "%.0f", gbps);
  else std::snprintf(buf, sizeof buf, "%.1f", gbps);
  return buf;
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

std::string nicDescription(const Node& n) {
  std::string d = n.netName();
  std::vector<std::string> extra;
  if (!n.hca.empty() && !n.ifName.empty()) extra.push_back(n.ifName);
  if (!n.linkLayer.empty()) extra.push_back(n.linkLayer);
  if (n.speedMbps > 0) extra.push_back(std::to_string(n.speedMbps / 1000) + " Gb/s");
  if (!n.state.empty()) extra.push_back(n.state);
  if (!n.busId.empty()) extra.push_back(n.busId);
  if (!extra.empty()) {
    d += " (";
    for (size_t i = 0; i < extra.size(); ++i) d += (i ? ", " : "") + extra[i];
    d += ")";
  }
  return d;
}

std::string dotEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o.push_back('\\');
    o.push_back(c);
  }
  return o;
}

}  // namespace

std::string formatPathMatrix(const Graph& g) {
  std::vector<int> cols;
  for (int i : g.gpus()) cols.push_back(i);
  for (int i : g.nics()) cols.push_back(i);
  for (int i : g.cpus()) cols.push_back(i);
  size_t w = 6;
  for (int i : cols) w = std::max(w, g.node(i).name.size() + 2);
  std::ostringstream o;
  o << pad("", w);
  for (int c : cols) o << pad(g.node(c).name, w);
  o << "CPU Affinity    NUMA Affinity\n";
  for (int r : cols) {
    const Node& rn = g.node(r);
    o << pad(rn.name, w);
    for (int c : cols) o << pad(r == c ? "X" : pathTypeName(g.pathType(r, c)), w);
    if (rn.type != NodeType::kCpu) {
      int cpu = g.cpuOf(r);
      std::string aff = cpu >= 0 && !g.node(cpu).cpus.empty() ? g.node(cpu).cpus : "N/A";
      o << pad(aff, 16) << (rn.numa >= 0 ? std::to_string(rn.numa) : "N/A");
    } else {
      o << pad(rn.cpus.empty() ? "N/A" : rn.cpus, 16) << rn.numa;
    }
    o << "\n";
  }
  o << "\nLegend:\n"
       "  X   = self\n"
       "  NVL = NVLink, directly or through NVSwitch\n"
       "  NVB = NVLink through an intermediate GPU\n"
       "  PIX = PCIe through at most one PCIe switch\n"
       "  PXB = PCIe through several PCIe switches (not through the CPU)\n"
       "  PHB = PCIe through the CPU's host bridge\n"
       "  SYS = PCIe and the inter-socket link between NUMA nodes\n"
       "  DIS = not connected\n";
  if (!g.nics().empty()) {
    o << "\nNIC Legend:\n";
    for (int i : g.nics()) o << "  " << g.node(i).name << ": " << nicDescription(g.node(i)) << "\n";
  }
  return o.str();
}

std::string formatNicAffinity(const Graph& g) {
  std::ostringstream o;
  const std::vector<int>& from = g.gpus().empty() ? g.cpus() : g.gpus();
  if (g.nics().empty()) {
    o << "No NICs found.\n";
    return o.str();
  }
  o << pad(g.gpus().empty() ? "NUMA" : "GPU", 8) << pad("Numa", 6) << "Nearest NICs\n";
  for (int f : from) {
    const Node& n = g.node(f);
    o << pad(n.name, 8) << pad(n.numa >= 0 ? std::to_string(n.numa) : "-", 6);
    std::vector<int> near = g.nearestNics(f);
    if (near.empty()) o << "none";
    for (size_t k = 0; k < near.size(); ++k) {
      const Path& p = g.path(f, near[k]);
      const Node& nic = g.node(near[k]);
      o << (k ? ", " : "") << nic.name << (nic.netName() != nic.name ? " " + nic.netName() : "") << " ("
        << pathTypeName(p.type) << ", " << fmtBw(p.bw) << " GB/s)";
    }
    o << "\n";
  }
  return o.str();
}

std::string formatDot(const Graph& g) {
  std::ostringstream o;
  o << "graph topology {\n  graph [rankdir=TB, fontname=\"Helvetica\"";
  if (!g.host().empty()) o << ", label=\"" << dotEscape(g.host()) << "\"";
  o << "];\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n";
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    std::string label = n.name;
    const char* shape = "box";
    const char* color = "white";
    switch (n.type) {
      case NodeType::kCpu:
        shape = "box3d";
        color = "lightblue";
        if (!n.cpus.empty()) label += "\\ncpus " + n.cpus;
        break;
      case NodeType::kPciSwitch:
        shape = "diamond";
        color = "lightgrey";
        if (!n.busId.empty()) label += "\\n" + n.busId;
        break;
      case NodeType::kGpu:
        shape = "box";
        color = "palegreen";
        if (!n.busId.empty()) label += "\\n" + n.busId;
        if (!n.model.empty()) label += "\\n" + dotEscape(n.model);
        break;
      case NodeType::kNic:
        shape = "ellipse";
        color = "khaki";
        label += "\\n" + dotEscape(n.netName());
        if (n.speedMbps > 0) label += "\\n" + std::to_string(n.speedMbps / 1000) + " Gb/s";
        break;
      case NodeType::kNvSwitch:
        shape = "octagon";
        color = "orange";
        if (n.chips > 0) label += "\\n" + std::to_string(n.chips) + " chips";
        break;
    }
    o << "  n" << i << " [label=\"" << label << "\", shape=" << shape << ", style=filled, fillcolor=" << color << "];\n";
  }
  for (const Link& l : g.links()) {
    std::string label = linkTypeName(l.type);
    if (l.type == LinkType::kNvl && l.count > 1) label += " x" + std::to_string(l.count);
    label += "\\n" + fmtBw(l.bw) + " GB/s";
    const char* style = l.type == LinkType::kNvl ? "color=green4, penwidth=2"
                        : l.type == LinkType::kSys ? "color=red, style=dashed"
                                                   : "color=black";
    o << "  n" << l.a << " -- n" << l.b << " [label=\"" << label << "\", " << style << "];\n";
  }
  o << "}\n";
  return o.str();
}

Status renderPng(const std::string& dotText, const std::string& pngPath) {
  // Through a temporary file rather than a pipe, so a dot that exits early cannot kill us
  // with SIGPIPE.
  const char* tmpdir = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/braid-topo-XXXXXX";
  std::vector<char> path(tmpl.begin(), tmpl.end());
  path.push_back('\0');
  int fd = mkstemp(path.data());
  if (fd < 0) return systemError("mkstemp", errno);
  size_t off = 0;
  while (off < dotText.size()) {
    ssize_t w = write(fd, dotText.data() + off, dotText.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = errno;
      close(fd);
      unlink(path.data());
      return systemError("write", err);
    }
    off += static_cast<size_t>(w);
  }
  close(fd);
  std::string out = pngPath;
  char* argv[] = {const_cast<char*>("dot"), const_cast<char*>("-Tpng"), const_cast<char*>("-o"), out.data(), path.data(), nullptr};
  pid_t pid;
  int rc = posix_spawnp(&pid, "dot", nullptr, nullptr, argv, environ);
  if (rc != 0) {
    unlink(path.data());
    return Status(Code::kSystemError, std::string("cannot run Graphviz 'dot': ") + std::strerror(rc));
  }
  int wst = 0;
  while (waitpid(pid, &wst, 0) < 0) {
    if (errno != EINTR) {
      int err = errno;
      unlink(path.data());
      return systemError("waitpid", err);
    }
  }
  unlink(path.data());
  if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
    return Status(Code::kSystemError, "dot -Tpng -o " + pngPath + " failed (exit status " +
                                          std::to_string(WIFEXITED(wst) ? WEXITSTATUS(wst) : -1) + ")");
  return Status::ok();
}

}  // namespace braid::topology
