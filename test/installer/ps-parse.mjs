// ps-parse.mjs FILE...: parses PowerShell scripts with tree-sitter-powershell
// and prints every ERROR or MISSING node as FILE:LINE:COL; exits 1 if any.
// The grammar follows Windows PowerShell 5.1 syntax (what install.ps1 targets).
import Parser from 'tree-sitter';
import PowerShell from 'tree-sitter-powershell';
import { readFileSync } from 'node:fs';

const parser = new Parser();
parser.setLanguage(PowerShell);
let bad = 0;
for (const file of process.argv.slice(2)) {
  const tree = parser.parse(readFileSync(file, 'utf8'), undefined, { bufferSize: 1 << 22 });
  const walk = (node) => {
    if (node.isError || node.type === 'ERROR' || node.isMissing) {
      bad++;
      const p = node.startPosition;
      console.log(`${file}:${p.row + 1}:${p.column + 1}: ${node.isMissing ? 'missing ' + node.type : 'syntax error'}: ${node.text.slice(0, 60).replace(/\s+/g, ' ')}`);
      if (node.isMissing) return;
    }
    for (let i = 0; i < node.childCount; i++) walk(node.child(i));
  };
  walk(tree.rootNode);
  console.log(`${file}: ${tree.rootNode.descendantCount} nodes parsed`);
}
process.exit(bad ? 1 : 0);
