import './base.css';
import './panel.css';
import './subcall_list.css';
